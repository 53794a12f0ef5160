// SPDX-License-Identifier: MIT
/* pyoffsets: table lookup and the 3.13+ _Py_DebugOffsets reader. */
#include <errno.h>
#include <string.h>

#include "pyoffsets.h"

/* tables.c (generated) */
extern const struct py_offsets *const py_offsets_tables[];
extern const size_t py_offsets_ntables;

const struct py_offsets *py_offsets_for(unsigned int version)
{
	size_t i;

	for (i = 0; i < py_offsets_ntables; i++)
		if (py_offsets_tables[i]->version == version)
			return py_offsets_tables[i];
	errno = ENOTSUP;
	return NULL;
}

const struct py_offsets *const *py_offsets_all(size_t *nr)
{
	*nr = py_offsets_ntables;
	return py_offsets_tables;
}

#define DBG_MEMBER_(name, path, width) offsetof(struct py_offsets, name),
static const size_t dbg_member[PY_DBG_NR] = {PY_DEBUG_FIELDS(DBG_MEMBER_)};
#undef DBG_MEMBER_
#define DBG_NAME_(name, path, width) #name,
static const char *const dbg_name[PY_DBG_NR] = {PY_DEBUG_FIELDS(DBG_NAME_)};
#undef DBG_NAME_
#define DBG_WIDTH_(name, path, width) width,
static const uint8_t dbg_width[PY_DBG_NR] = {PY_DEBUG_FIELDS(DBG_WIDTH_)};
#undef DBG_WIDTH_

const char *py_dbg_field_name(unsigned int i)
{
	return i < PY_DBG_NR ? dbg_name[i] : NULL;
}

static int get_u64(const void *buf, size_t len, uint32_t off, uint64_t *v)
{
	if (off == PYO_NONE || off > len || len - off < sizeof(*v))
		return -EINVAL;
	memcpy(v, (const char *)buf + off, sizeof(*v));
	return 0;
}

int py_offsets_apply_debug(const struct py_offsets *table, const void *buf, size_t len,
			   unsigned int version, struct py_offsets *out, uint64_t *hexversion)
{
	struct py_offsets o = *table;
	uint64_t ver, ft, v, size;
	unsigned int i;

	*out = *table;
	if (table->dbg_size == PYO_NONE || len < table->dbg_size ||
	    memcmp(buf, PY_DEBUG_COOKIE, 8) != 0)
		return -EINVAL;
	if (get_u64(buf, len, table->dbg_version, &ver))
		return -EINVAL;
	if (hexversion)
		*hexversion = ver;
	/* PY_VERSION_HEX: 0xMMmmppLS; the process must be the version it said it is. */
	if (((ver >> 16) & 0xffff) != version)
		return -ERANGE;
	/* Free-threaded builds (3.13t, 3.14t) have another object header and per-thread
	 * bytecode: no table describes them. */
	if (table->dbg_free_threaded == PYO_NONE ||
	    get_u64(buf, len, table->dbg_free_threaded, &ft))
		return -EINVAL;
	if (ft)
		return -ENOTSUP;
	/* Target memory: every offset must lie inside the struct it belongs to, by the size
	 * the same block gives, and no struct may be absurdly large. */
	for (i = 0; i < PY_DBG_NR; i++) {
		if (table->dbg[i] == PYO_NONE)
			continue;
		if (get_u64(buf, len, table->dbg[i], &v) ||
		    get_u64(buf, len, table->dbg_bound[i], &size) || size > PY_DBG_STRUCT_MAX ||
		    v > size || size - v < dbg_width[i])
			return -EBADMSG;
		memcpy((char *)&o + dbg_member[i], &(uint32_t){(uint32_t)v}, sizeof(uint32_t));
	}
	*out = o;
	return 0;
}
