// SPDX-License-Identifier: MIT
/*
 * pycode: resolving frame records (code object address, instruction, checksum) to names,
 * files and lines, with a cache per (address, checksum); the names are interned in the
 * pyproc's string pool, which struct frame borrows from.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "python/pylines.h"
#include "python/pyproc_int.h"

#define TABLE_MAX (1 << 20) /* a line table larger than this is not believed */
#define CODE_MAX  (1 << 20) /* nor bytecode larger than this */
#define UNKNOWN	  "[unknown]"

/* The fields of a code object the checksum covers, read in one go. */
struct code_hdr {
	uint64_t type, name, filename;
	int32_t firstlineno;
};

static int read_code_hdr(struct pyproc *pp, uint64_t code, struct code_hdr *h)
{
	const struct py_offsets *o = &pp->off;
	uint8_t buf[PY_HDR_MAX];
	uint32_t size = 0;
	int err;

	size = o->co_name + 8;
	if (o->co_filename + 8 > size)
		size = o->co_filename + 8;
	if (o->co_firstlineno + 4 > size)
		size = o->co_firstlineno + 4;
	if (size > sizeof(buf))
		return -EINVAL;
	err = pp_read(pp, code, buf, size);
	if (err)
		return err;
	memcpy(&h->type, buf + o->ob_type, 8);
	memcpy(&h->name, buf + o->co_name, 8);
	memcpy(&h->filename, buf + o->co_filename, 8);
	memcpy(&h->firstlineno, buf + o->co_firstlineno, 4);
	return 0;
}

struct code_key {
	uint64_t addr;
	uint32_t checksum;
	int32_t lasti; /* used only by the line cache */
};

/* Read a code object into a new cache entry. */
static int load_code(struct pyproc *pp, uint64_t addr, uint32_t checksum, struct pycode *pc)
{
	const struct py_offsets *o = &pp->off;
	struct code_hdr h;
	uint64_t table, qual;
	int err;

	memset(pc, 0, sizeof(*pc));
	err = read_code_hdr(pp, addr, &h);
	if (err)
		return err;
	if (pp->code_type && h.type != pp->code_type)
		return -ESTALE; /* no longer a code object */
	if (py_code_checksum(h.name, h.filename, (uint32_t)h.firstlineno) != checksum)
		return -ESTALE;
	pc->name = py_str_interned(pp, h.name);
	pc->file = py_str_interned(pp, h.filename);
	if (!pc->name || !pc->file)
		return errno ? -errno : -EFAULT;
	if (o->co_qualname != PYO_NONE && !pp_ptr(pp, addr + o->co_qualname, &qual))
		pc->qualname = py_str_interned(pp, qual);
	pc->firstlineno = h.firstlineno;
	err = pp_ptr(pp, addr + (o->co_lnotab != PYO_NONE ? o->co_lnotab : o->co_linetable),
		     &table);
	if (!err)
		err = py_read_bytes(pp, table, TABLE_MAX, &pc->table, &pc->table_len);
	if (err) {
		/* Names without lines are still worth having. */
		pc->table = NULL;
		pc->table_len = 0;
	}
	return 0;
}

/* The cache entry for (addr, checksum), loading it on first use. */
static struct pycode *get_code(struct pyproc *pp, uint64_t addr, uint32_t checksum)
{
	struct code_key key = {addr, checksum, 0};
	uint64_t *slot;
	int inserted;

	slot = bmap__upsert(pp->codes, &key, sizeof(key), 0, &inserted);
	if (!slot)
		return NULL;
	if (inserted) {
		struct pycode *pc;

		if (pp->ncode == pp->capcode) {
			size_t ncap = pp->capcode ? pp->capcode * 2 : 256;
			struct pycode *tmp = realloc(pp->code_arr, ncap * sizeof(*tmp));

			if (!tmp) {
				*slot = 0;
				return NULL;
			}
			pp->code_arr = tmp;
			pp->capcode = ncap;
		}
		pc = &pp->code_arr[pp->ncode];
		pc->err = load_code(pp, addr, checksum, pc);
		*slot = ++pp->ncode;
	} else if (!*slot) {
		return NULL;
	}
	return &pp->code_arr[*slot - 1];
}

/*
 * The code units of the code object at @addr into @pc, read on first need (3.10+): 3.11+
 * holds them inline (co_code_adaptive, Py_SIZE(code) units), 3.10 in the bytes co_code.
 * Return 0 or -errno (also on later calls, without reading again).
 */
static int load_bytecode(struct pyproc *pp, uint64_t addr, struct pycode *pc)
{
	const struct py_offsets *o = &pp->off;
	uint64_t bytes;
	int64_t units;
	size_t len;
	int err;

	if (pc->code_read)
		return pc->code ? 0 : -ENOENT;
	pc->code_read = true;
	if (o->co_code_adaptive != PYO_NONE) {
		err = pp_read(pp, addr + o->ob_size, &units, sizeof(units));
		if (err)
			return err;
		if (units <= 0 || units > CODE_MAX / 2)
			return -EINVAL;
		pc->code = malloc(units * 2);
		if (!pc->code)
			return -ENOMEM;
		err = pp_read(pp, addr + o->co_code_adaptive, pc->code, units * 2);
		if (err) {
			free(pc->code);
			pc->code = NULL;
			return err;
		}
		pc->ncode = units;
		return 0;
	}
	if (o->co_code == PYO_NONE)
		return -ENOENT;
	err = pp_ptr(pp, addr + o->co_code, &bytes);
	if (!err)
		err = py_read_bytes(pp, bytes, CODE_MAX, &pc->code, &len);
	if (err) {
		pc->code = NULL;
		return err;
	}
	pc->ncode = len / 2;
	return 0;
}

int pyproc__resolve(struct pyproc *pp, const struct py_frame_rec *rec, struct frame *out)
{
	struct code_key key = {rec->code, rec->meta >> 1, rec->lasti};
	struct pycode *pc;
	uint64_t *slot;
	int line, inserted;

	memset(out, 0, sizeof(*out));
	out->kind = FRAME_PYTHON;
	out->func = UNKNOWN;
	pc = get_code(pp, rec->code, rec->meta >> 1);
	if (!pc)
		return -ENOMEM;
	if (pc->err)
		return pc->err;
	out->func = pc->name;
	out->qualname = pc->qualname;
	out->file = pc->file;
	out->module = pc->file;
	/* Lines: decoded once per (code, instruction). */
	slot = bmap__upsert(pp->lines, &key, sizeof(key), 0, &inserted);
	if (slot && !inserted) {
		out->line = (int)*slot - 1;
		return 0;
	}
	line = pc->table ? pylines_line(pp->version, pc->table, pc->table_len, pc->firstlineno,
					rec->lasti)
			 : 0;
	/* An instruction without a line: a jump resumes at its target's (pylines.h). */
	if (line < 0 && pp->version >= PY_VER(3, 10) && !load_bytecode(pp, rec->code, pc))
		line = pylines_jump_line(pp->version, pc->table, pc->table_len, pc->firstlineno,
					 pc->code, pc->ncode, rec->lasti);
	out->line = line > 0 ? line : 0; /* 0: unknown */
	if (slot)
		*slot = (uint64_t)out->line + 1;
	return 0;
}
