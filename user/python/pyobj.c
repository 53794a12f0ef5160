// SPDX-License-Identifier: MIT
/*
 * pyobj: reading Python objects of another process: str, bytes, int, dict, instance
 * attributes. Every size and pointer read from the target is bounded before use: the target
 * keeps running and may be rewriting what we read.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "python/pyproc_int.h"

#define DICT_MAX_ENTRIES 65536

/* Py_TPFLAGS_* (Include/object.h) */
#define TPFLAGS_INLINE_VALUES	 (1ul << 2) /* 3.13+ */
#define TPFLAGS_MANAGED_DICT	 (1ul << 4) /* 3.11+ */
#define TPFLAGS_HEAPTYPE	 (1ul << 9)
#define TPFLAGS_UNICODE_SUBCLASS (1ul << 28)

/*
 * @c as UTF-8 at @p (1-4 bytes), as the interpreter's own encoder with "surrogatepass" writes
 * it: a lone surrogate stays visible as its three bytes (text_escape shows them); past
 * U+10FFFF is U+FFFD.
 */
static int put_utf8(char *p, uint32_t c)
{
	if (c > 0x10ffff)
		c = 0xfffd;
	if (c < 0x80) {
		p[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		p[0] = (char)(0xc0 | c >> 6);
		p[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		p[0] = (char)(0xe0 | c >> 12);
		p[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		p[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	p[0] = (char)(0xf0 | c >> 18);
	p[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	p[2] = (char)(0x80 | ((c >> 6) & 0x3f));
	p[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

/*
 * Whether the object at @addr is a str: its type is PyUnicode_Type or a subclass of it
 * (Py_TPFLAGS_UNICODE_SUBCLASS). A name read from an object that has since been freed (a code
 * object of exec'd code, resolved after it ran) may be any object by now. True when the
 * interpreter's PyUnicode_Type is unknown. 0, -EINVAL (not a str) or a read error.
 */
static int check_str_type(struct pyproc *pp, uint64_t addr)
{
	uint64_t type, flags;
	int err;

	if (!pp->objs[PYS_STR])
		return 0;
	err = pp_ptr(pp, addr + pp->off.ob_type, &type);
	if (err || type == pp->objs[PYS_STR])
		return err;
	err = pp_ptr(pp, type + pp->off.tp_flags, &flags);
	if (err)
		return err;
	return flags & TPFLAGS_UNICODE_SUBCLASS ? 0 : -EINVAL;
}

int py_read_str_cps(struct pyproc *pp, uint64_t addr, size_t max, uint32_t **cps, size_t *n,
		    size_t *length)
{
	const struct py_offsets *o = &pp->off;
	uint32_t state, kind, compact, ascii, *c = NULL;
	int64_t len;
	uint64_t data;
	uint8_t *raw = NULL;
	size_t i, k;
	int err;

	if (!addr)
		return -EFAULT;
	err = check_str_type(pp, addr);
	if (!err)
		err = pp_read(pp, addr + o->unicode_state, &state, sizeof(state));
	if (!err)
		err = pp_read(pp, addr + o->unicode_length, &len, sizeof(len));
	if (err)
		return err;
	kind = (state >> o->unicode_kind_bit) & 7;
	compact = (state >> o->unicode_compact_bit) & 1;
	ascii = (state >> o->unicode_ascii_bit) & 1;
	/* kind 0 is PyUnicode_WCHAR_KIND (<= 3.11): a legacy string not made ready. A str
	 * longer than PY_SSIZE_T_MAX / 4 cannot exist: the length is garbage. */
	if (len < 0 || len > INT64_MAX / 4 || (kind != 1 && kind != 2 && kind != 4) ||
	    (ascii && kind != 1))
		return -EINVAL;
	k = (uint64_t)len > max ? max : (size_t)len;
	if (compact)
		data = addr + (ascii ? o->ascii_size : o->compact_size);
	else if ((err = pp_ptr(pp, addr + o->unicode_data, &data)))
		return err;
	raw = malloc(k * kind + 1);
	c = malloc((k + 1) * sizeof(*c));
	if (!raw || !c) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = pp_read(pp, data, raw, k * kind);
	if (err)
		goto cleanup;
	for (i = 0; i < k; i++) {
		if (kind == 1) {
			c[i] = raw[i];
		} else if (kind == 2) {
			uint16_t u;

			memcpy(&u, raw + 2 * i, 2);
			c[i] = u;
		} else {
			memcpy(&c[i], raw + 4 * i, 4);
		}
	}
	*cps = c;
	*n = k;
	*length = (size_t)len;
	c = NULL;
	err = 0;
cleanup:
	free(raw);
	free(c);
	return err;
}

int py_read_str(struct pyproc *pp, uint64_t addr, char **out, size_t *len)
{
	uint32_t *cps = NULL;
	size_t n, length, i;
	char *s;
	int err;

	err = py_read_str_cps(pp, addr, PY_STR_MAX, &cps, &n, &length);
	if (err)
		return err;
	s = malloc(n * 4 + 1);
	if (!s) {
		free(cps);
		return -ENOMEM;
	}
	for (i = 0, *len = 0; i < n; i++)
		*len += put_utf8(s + *len, cps[i]);
	s[*len] = 0;
	*out = s;
	free(cps);
	return 0;
}

const char *py_str_interned(struct pyproc *pp, uint64_t addr)
{
	const char *r;
	char *s;
	size_t len;
	int err = py_read_str(pp, addr, &s, &len);

	if (err) {
		errno = -err;
		return NULL;
	}
	r = strpool__intern(pp->strs, s); /* a str with an embedded NUL ends there */
	free(s);
	return r;
}

int py_read_bytes(struct pyproc *pp, uint64_t addr, size_t max, uint8_t **out, size_t *len)
{
	int64_t size;
	uint8_t *buf;
	int err;

	err = pp_read(pp, addr + pp->off.ob_size, &size, sizeof(size));
	if (err)
		return err;
	if (size < 0 || (uint64_t)size > max)
		return -EINVAL;
	buf = malloc(size ? (size_t)size : 1);
	if (!buf)
		return -ENOMEM;
	err = pp_read(pp, addr + pp->off.bytes_sval, buf, (size_t)size);
	if (err) {
		free(buf);
		return err;
	}
	*out = buf;
	*len = (size_t)size;
	return 0;
}

int py_long_header(struct pyproc *pp, uint64_t addr, uint64_t *ndigits, bool *negative)
{
	const struct py_offsets *o = &pp->off;
	int err;

	if (o->long_lv_tag != PYO_NONE) {
		/* 3.12+ (gh-101291): lv_tag = ndigits << 3 | sign (0 positive, 1 zero, 2 neg). */
		uint64_t tag;

		err = pp_read(pp, addr + o->long_lv_tag, &tag, sizeof(tag));
		if (err)
			return err;
		if ((tag & 3) == 3)
			return -EINVAL;
		*ndigits = tag >> 3;
		*negative = (tag & 3) == 2;
	} else {
		/* <= 3.11: ob_size = +/- the number of digits. */
		int64_t size;

		err = pp_read(pp, addr + o->ob_size, &size, sizeof(size));
		if (err)
			return err;
		*negative = size < 0;
		*ndigits = *negative ? 0 - (uint64_t)size : (uint64_t)size;
	}
	return 0;
}

int py_read_long(struct pyproc *pp, uint64_t addr, int64_t *out)
{
	const struct py_offsets *o = &pp->off;
	uint32_t digits[3];
	uint64_t ndigits, v = 0;
	bool negative;
	int err, i;

	err = py_long_header(pp, addr, &ndigits, &negative);
	if (err)
		return err;
	/* 30-bit digits (PYLONG_BITS_IN_DIGIT on 64-bit builds): 3 digits hold 64 bits. */
	if (ndigits > 3)
		return -ERANGE;
	if (ndigits) {
		err = pp_read(pp, addr + o->long_digit, digits, ndigits * sizeof(digits[0]));
		if (err)
			return err;
	}
	for (i = (int)ndigits - 1; i >= 0; i--) {
		if (v >> 34)
			return -ERANGE;
		v = v << 30 | (digits[i] & 0x3fffffff);
	}
	if (v > (uint64_t)INT64_MAX + negative)
		return -ERANGE;
	*out = negative ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

int py_type_name(struct pyproc *pp, uint64_t tp, char *buf, size_t size)
{
	uint64_t name, flags;
	const char *dot;
	char *heap = NULL;
	size_t i, len = 0;
	ssize_t n;
	int err;

	err = pp_ptr(pp, tp + pp->off.tp_flags, &flags);
	if (err)
		return err;
	if (flags & TPFLAGS_HEAPTYPE) {
		/* A heap type's __name__ is ht_name. Its tp_name is the same for a class statement,
		 * but "module.Name" for a C type made from a spec (PyType_FromSpec: re.Pattern
		 * from 3.10, _asyncio.Task and collections.deque from 3.12). */
		err = pp_ptr(pp, tp + pp->off.ht_name, &name);
		err = err ?: py_read_str(pp, name, &heap, &len);
		if (err)
			return err;
		if (len >= size || memchr(heap, 0, len)) {
			free(heap);
			return -EINVAL;
		}
		memcpy(buf, heap, len + 1);
		free(heap);
	} else {
		err = pp_ptr(pp, tp + pp->off.tp_name, &name);
		if (err)
			return err;
		n = pymem_read_partial(pp->pid, name, buf, size);
		if (n <= 0)
			return n < 0 ? (int)n : -EFAULT;
		if (!memchr(buf, 0, (size_t)n))
			return -EINVAL; /* no terminator within reach: not a type name */
		/* A static type's __name__: tp_name after its last dot (typeobject.c type_name). */
		dot = strrchr(buf, '.');
		if (dot)
			memmove(buf, dot + 1, strlen(dot + 1) + 1);
	}
	if (!buf[0])
		return -EINVAL;
	for (i = 0; buf[i]; i++)
		if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
			return -EINVAL;
	return 0;
}

/* Walk the entries of a keys object; values come from @values (split tables) if not 0. */
static int keys_foreach(struct pyproc *pp, uint64_t keys, uint64_t values, size_t limit,
			int (*fn)(struct pyproc *, uint64_t, uint64_t, void *), void *ctx)
{
	const struct py_offsets *o = &pp->off;
	uint64_t entries, esize, *vals = NULL;
	int64_t nentries;
	uint8_t *buf = NULL;
	size_t i;
	int err;
	bool unicode = false;

	err = pp_read(pp, keys + o->dk_nentries, &nentries, sizeof(nentries));
	if (err)
		return err;
	if (nentries < 0 || nentries > DICT_MAX_ENTRIES)
		return -EINVAL;
	if (o->dk_size != PYO_NONE) {
		/* <= 3.10: dk_size slots of 1/2/4/8-byte indices (DK_IXSIZE), then entries. */
		int64_t size;
		uint64_t ix;

		err = pp_read(pp, keys + o->dk_size, &size, sizeof(size));
		if (err)
			return err;
		if (size <= 0 || size > 4 * DICT_MAX_ENTRIES)
			return -EINVAL;
		ix = size <= 0xff ? 1 : size <= 0xffff ? 2 : size <= 0xffffffffLL ? 4 : 8;
		entries = keys + o->dk_indices + (uint64_t)size * ix;
		esize = o->dict_entry_size;
	} else {
		/* 3.11+: 1 << dk_log2_index_bytes bytes of indices; entries are PyDictKeyEntry
		 * (DICT_KEYS_GENERAL = 0) or PyDictUnicodeEntry (unicode and split keys). */
		uint8_t hdr[3];

		err = pp_read(pp, keys + o->dk_log2_size, hdr, sizeof(hdr));
		if (err)
			return err;
		if (o->dk_log2_index_bytes != o->dk_log2_size + 1 ||
		    o->dk_kind != o->dk_log2_size + 2)
			return -EINVAL;
		if (hdr[1] > 40)
			return -EINVAL;
		entries = keys + o->dk_indices + (1ull << hdr[1]);
		unicode = hdr[2] != 0;
		esize = unicode ? o->dict_uentry_size : o->dict_entry_size;
	}
	if ((size_t)nentries > limit)
		nentries = (int64_t)limit;
	if (!nentries)
		return 0;
	buf = malloc((size_t)nentries * esize);
	if (!buf)
		return -ENOMEM;
	err = pp_read(pp, entries, buf, (size_t)nentries * esize);
	if (err)
		goto cleanup;
	if (values) {
		vals = malloc((size_t)nentries * sizeof(*vals));
		if (!vals) {
			err = -ENOMEM;
			goto cleanup;
		}
		err = pp_read(pp, values, vals, (size_t)nentries * sizeof(*vals));
		if (err)
			goto cleanup;
	}
	for (i = 0; i < (size_t)nentries; i++) {
		const uint8_t *e = buf + i * esize;
		uint64_t key, value;

		/* {me_hash, me_key, me_value} or {me_key, me_value} */
		memcpy(&key, e + (unicode ? 0 : 8), 8);
		memcpy(&value, e + (unicode ? 8 : 16), 8);
		if (values)
			value = vals[i];
		if (!key || !value)
			continue; /* deleted or unused */
		err = fn(pp, key, value, ctx);
		if (err)
			goto cleanup;
	}
	err = 0;
cleanup:
	free(buf);
	free(vals);
	return err;
}

/* The values array of a split dict: ma_values (<= 3.10 PyObject **, 3.11+ PyDictValues *). */
static uint64_t split_values(struct pyproc *pp, uint64_t ma_values)
{
	if (!ma_values)
		return 0;
	return pp->off.dv_values != PYO_NONE ? ma_values + pp->off.dv_values : ma_values;
}

int py_dict_foreach(struct pyproc *pp, uint64_t dict, size_t limit,
		    int (*fn)(struct pyproc *pp, uint64_t key, uint64_t value, void *ctx),
		    void *ctx)
{
	uint64_t keys, values;
	int err;

	err = pp_ptr(pp, dict + pp->off.dict_ma_keys, &keys);
	if (!err)
		err = pp_ptr(pp, dict + pp->off.dict_ma_values, &values);
	if (err)
		return err;
	if (!keys)
		return -EINVAL;
	return keys_foreach(pp, keys, split_values(pp, values), limit, fn, ctx);
}

struct find_str {
	const char *name;
	uint64_t value;
	bool found;
	uint64_t *key; /* with a key address: match that key object only, reading nothing */
};

static int match_key(struct pyproc *pp, uint64_t key, uint64_t value, void *ctx)
{
	struct find_str *f = ctx;
	char *s;
	size_t len;

	if (f->key && *f->key) {
		if (key != *f->key)
			return 0;
		f->value = value;
		f->found = true;
		return 1;
	}
	if (py_read_str(pp, key, &s, &len))
		return 0; /* not a str key */
	if (len == strlen(f->name) && !memcmp(s, f->name, len)) {
		f->value = value;
		f->found = true;
		if (f->key)
			*f->key = key;
	}
	free(s);
	return f->found;
}

/* Find @f in @dict: by key identity first if @f has a key address, then by contents. */
static int dict_find(struct pyproc *pp, uint64_t dict, struct find_str *f)
{
	int err = py_dict_foreach(pp, dict, DICT_MAX_ENTRIES, match_key, f);

	if (err >= 0 && !f->found && f->key && *f->key) {
		*f->key = 0; /* not that key object (any more): compare the strings */
		err = py_dict_foreach(pp, dict, DICT_MAX_ENTRIES, match_key, f);
	}
	if (err < 0)
		return err;
	return f->found ? 0 : -ENOENT;
}

int py_dict_get_str(struct pyproc *pp, uint64_t dict, const char *name, uint64_t *value)
{
	struct find_str f = {name, 0, false, NULL};
	int err = dict_find(pp, dict, &f);

	if (!err)
		*value = f.value;
	return err;
}

int py_getattr_dict(struct pyproc *pp, uint64_t obj, const char *name, uint64_t *value)
{
	return py_getattr_dict_keyed(pp, obj, name, NULL, value);
}

int py_getattr_dict_keyed(struct pyproc *pp, uint64_t obj, const char *name, uint64_t *key,
			  uint64_t *value)
{
	const struct py_offsets *o = &pp->off;
	struct find_str f = {name, 0, false, key};
	uint64_t type, flags, dict = 0, values = 0, keys;
	int64_t dictoffset;
	int err;

	err = pp_ptr(pp, obj + o->ob_type, &type);
	if (!err)
		err = pp_ptr(pp, type + o->tp_flags, &flags);
	if (err)
		return err;
	if (pp->version >= PY_VER(3, 11) && (flags & TPFLAGS_MANAGED_DICT)) {
		/* The dict pointer sits 3 words before the object (MANAGED_DICT_OFFSET). */
		uint64_t slot;

		err = pp_ptr(pp, obj - 3 * 8, &slot);
		if (err)
			return err;
		if (pp->version == PY_VER(3, 11)) {
			/* 3.11: values pointer at -4 words when no dict was materialised. */
			dict = slot;
			if (!dict && (err = pp_ptr(pp, obj - 4 * 8, &values)))
				return err;
		} else if (pp->version == PY_VER(3, 12)) {
			/* 3.12: PyDictOrValues, tagged: an odd value is the values pointer - 1
			 * (_PyDictOrValues_SetValues, Include/internal/pycore_object.h). */
			if (slot & 1)
				values = slot + 1;
			else
				dict = slot;
		} else {
			/* 3.13+: inline values right after the object (tp_basicsize) while valid. */
			dict = slot;
			if (!dict && (flags & TPFLAGS_INLINE_VALUES)) {
				int64_t basicsize;
				uint8_t valid;

				err = pp_read(pp, type + o->tp_basicsize, &basicsize, 8);
				if (!err)
					err = pp_read(pp, obj + basicsize + 3, &valid, 1);
				if (err)
					return err;
				if (valid)
					values = obj + (uint64_t)basicsize;
			}
		}
	} else {
		err = pp_read(pp, type + o->tp_dictoffset, &dictoffset, sizeof(dictoffset));
		if (err)
			return err;
		if (dictoffset <= 0)
			return -ENOTSUP; /* no __dict__, or at the end of a variable-size object */
		err = pp_ptr(pp, obj + (uint64_t)dictoffset, &dict);
		if (err)
			return err;
	}
	if (dict) {
		err = dict_find(pp, dict, &f);
		if (!err)
			*value = f.value;
		return err;
	}
	if (!values)
		return -ENOENT;
	/* Values without a dict: the keys are the type's shared keys. */
	err = pp_ptr(pp, type + o->ht_cached_keys, &keys);
	if (err)
		return err;
	if (!keys)
		return -ENOENT;
	err = keys_foreach(pp, keys, split_values(pp, values), DICT_MAX_ENTRIES, match_key, &f);
	if (err >= 0 && !f.found && key && *key) {
		*key = 0;
		err = keys_foreach(pp, keys, split_values(pp, values), DICT_MAX_ENTRIES, match_key,
				   &f);
	}
	if (err < 0)
		return err;
	if (!f.found)
		return -ENOENT;
	*value = f.value;
	return 0;
}
