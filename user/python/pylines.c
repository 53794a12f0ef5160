// SPDX-License-Identifier: MIT
/*
 * pylines: CPython line tables. The semantics follow PyCode_Addr2Line of each version
 * (Objects/codeobject.c); the formats are documented in Objects/lnotab_notes.txt (3.8-3.10)
 * and Objects/locations.md (3.11+). Tables come from another process and may be corrupt:
 * every read is bounds-checked and a truncated entry ends the walk.
 */
#include <limits.h>

#include "python/pylines.h"
#include "pyoffsets/pyoffsets.h"
#include "pyoffsets/pyopcodes.h"

int pylines_lnotab(const uint8_t *tab, size_t len, int firstlineno, int addr)
{
	int line = firstlineno, a = 0;
	size_t i;

	if (addr < 0)
		return firstlineno;
	/* Each pair advances the address, then the line; the line of @addr is the one reached
	 * after the last pair whose cumulative address is <= @addr. Line increments are signed
	 * since 3.6 (bpo-26107). */
	for (i = 0; i + 1 < len; i += 2) {
		a += tab[i];
		if (a > addr)
			break;
		line += (int8_t)tab[i + 1];
	}
	return line;
}

int pylines_linetable310(const uint8_t *tab, size_t len, int firstlineno, int addr)
{
	int computed = firstlineno, start, end = 0, line = -1;
	size_t i;

	if (addr < 0)
		return firstlineno;
	/* Ranges [start, end) of byte offsets; a range of length 0 only moves the line (see
	 * PyLineTable_NextAddressRange, which skips them). */
	for (i = 0; i + 1 < len; i += 2) {
		int ldelta = (int8_t)tab[i + 1];

		start = end;
		end += tab[i];
		if (ldelta == -128) {
			line = -1;
		} else {
			computed += ldelta;
			line = computed;
		}
		if (end > start && addr >= start && addr < end)
			return line;
	}
	return -1; /* past the table: PyCode_Addr2Line says -1 */
}

/* Unsigned varint: 6 bits per byte, bit 6 = more follows. */
static int read_varint(const uint8_t *tab, size_t len, size_t *pos, unsigned int *out)
{
	unsigned int val, shift = 0;
	uint8_t b;

	if (*pos >= len)
		return -1;
	b = tab[(*pos)++];
	val = b & 63;
	while (b & 64) {
		if (*pos >= len || shift > 24)
			return -1;
		b = tab[(*pos)++];
		shift += 6;
		val |= (unsigned int)(b & 63) << shift;
	}
	*out = val;
	return 0;
}

static int read_svarint(const uint8_t *tab, size_t len, size_t *pos, int *out)
{
	unsigned int u;

	if (read_varint(tab, len, pos, &u))
		return -1;
	*out = (u & 1) ? -(int)(u >> 1) : (int)(u >> 1);
	return 0;
}

/* Location entry codes (Include/cpython/code.h, _PyCodeLocationInfoKind). */
enum {
	LOC_SHORT0 = 0,	    /* 0-9: same line, one column byte */
	LOC_ONE_LINE0 = 10, /* 10-12: line delta 0, 1, 2; two column bytes */
	LOC_NO_COLUMNS = 13,
	LOC_LONG = 14,
	LOC_NONE = 15,
};

int pylines_locations(const uint8_t *tab, size_t len, int firstlineno, int addr)
{
	int computed = firstlineno;
	long start, end = 0;
	size_t pos = 0;

	if (addr < 0)
		return firstlineno;
	while (pos < len) {
		uint8_t first = tab[pos];
		int code = (first >> 3) & 15, delta = 0, line;

		if (!(first & 0x80))
			return -1; /* not at an entry start: corrupt */
		start = end;
		end += ((first & 7) + 1) * 2; /* code units -> bytes */
		if (code == LOC_NO_COLUMNS || code == LOC_LONG) {
			size_t p = pos + 1;

			if (read_svarint(tab, len, &p, &delta))
				return -1;
		} else if (code >= LOC_ONE_LINE0 && code < LOC_NO_COLUMNS) {
			delta = code - LOC_ONE_LINE0;
		}
		computed += delta;
		line = code == LOC_NONE ? -1 : computed;
		if (addr >= start && addr < end)
			return line;
		/* The next entry starts at the next byte with the high bit set. */
		do {
			pos++;
		} while (pos < len && !(tab[pos] & 0x80));
	}
	return -1;
}

int pylines_line(unsigned int version, const uint8_t *tab, size_t len, int firstlineno, int lasti)
{
	int addr = lasti < 0 ? -1 : lasti > INT_MAX / 2 ? INT_MAX - 1 : lasti * 2;

	if (version <= PY_VER(3, 9))
		return pylines_lnotab(tab, len, firstlineno, addr);
	if (version == PY_VER(3, 10))
		return pylines_linetable310(tab, len, firstlineno, addr);
	return pylines_locations(tab, len, firstlineno, addr);
}

int pylines_jump_target(unsigned int version, const uint8_t *code, size_t n, int lasti)
{
	const struct py_opcodes *ops = py_opcodes_for(version);
	unsigned int op;
	uint64_t arg, ext = 0; /* the code is the target's: any prefix chain, no overflow */
	size_t i = 0;
	int64_t target;

	if (!ops || !code || lasti < 0 || (size_t)lasti >= n)
		return -1;
	/* Walk instruction by instruction: the length of each is its opcode's. */
	while (i < (size_t)lasti) {
		op = code[2 * i];
		if (ops->caches[op] == PY_OP_UNDECODABLE)
			return -1;
		ext = ops->extended_arg[op] ? ((ext << 8) & 0xffffffff) | code[2 * i + 1] : 0;
		i += 1 + ops->caches[op];
	}
	if (i != (size_t)lasti)
		return -1; /* inside an instruction's caches */
	op = code[2 * i];
	arg = (ext << 8) | code[2 * i + 1];
	switch (ops->jump[op]) {
	case PY_JUMP_FORWARD:
		target = (int64_t)lasti + 1 + ops->caches[op] + (int64_t)arg;
		break;
	case PY_JUMP_BACKWARD:
		target = (int64_t)lasti + 1 + ops->caches[op] - (int64_t)arg;
		break;
	case PY_JUMP_ABSOLUTE:
		target = (int64_t)arg;
		break;
	default:
		return -1;
	}
	return target >= 0 && (uint64_t)target < n ? (int)target : -1;
}

int pylines_jump_line(unsigned int version, const uint8_t *tab, size_t len, int firstlineno,
		      const uint8_t *code, size_t n, int lasti)
{
	int hops, line = -1;

	/* A jump lands on a jump without a line in rare shapes only: a few hops suffice. */
	for (hops = 0; hops < 4 && line < 0; hops++) {
		lasti = pylines_jump_target(version, code, n, lasti);
		if (lasti < 0)
			return -1;
		line = pylines_line(version, tab, len, firstlineno, lasti);
	}
	return line;
}
