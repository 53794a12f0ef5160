// SPDX-License-Identifier: MIT
/*
 * pyoffsets-gen: extract the CPython struct layout of one interpreter build from its DWARF
 * and print the C table entry for pyoffsets/tables.c.
 *
 *   pyoffsets-gen [--version 3.X] FILE      FILE: libpython3.X.so or a python executable
 *
 * Every field of struct py_offsets is described below by the struct and member path it comes
 * from in each range of minor versions. Inside its range a member must exist (a missing one
 * means CPython changed a layout this code has not been taught about: fail loudly); outside
 * every range the field is PYO_NONE. Nested members ("gilstate.autoTSSkey") are found by
 * walking the nested struct types, anonymous members included.
 */
#include <ctype.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <getopt.h>
#include <glob.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pyoffsets.h"

enum spec_kind {
	K_OFF,	/* offsetof(type, path) */
	K_SIZE, /* sizeof(type) */
	K_BIT,	/* bit offset of a bit-field member relative to its containing struct */
};

struct spec {
	const char *field;   /* member of struct py_offsets */
	unsigned int lo, hi; /* minor versions (inclusive) this source applies to */
	enum spec_kind kind;
	const char *type; /* typedef or struct tag */
	const char *path; /* member path; NULL for K_SIZE */
	bool asyncio;	  /* defined in the _asyncio extension module (its own DWARF) */
};

/* Ranges that run to the newest supported version say LAST: a new version is then checked
 * against every such member (and fails loudly where one moved). */
#define LAST PY_MINOR_MAX
#define ALL  PY_MINOR_MIN, LAST

static const struct spec specs[] = {
	{"ob_type", ALL, K_OFF, "PyObject", "ob_type"},
	{"ob_size", ALL, K_OFF, "PyVarObject", "ob_size"},
	{"tp_name", ALL, K_OFF, "PyTypeObject", "tp_name"},
	{"tp_basicsize", ALL, K_OFF, "PyTypeObject", "tp_basicsize"},
	{"tp_dictoffset", ALL, K_OFF, "PyTypeObject", "tp_dictoffset"},
	{"tp_flags", ALL, K_OFF, "PyTypeObject", "tp_flags"},
	{"ht_cached_keys", ALL, K_OFF, "PyHeapTypeObject", "ht_cached_keys"},
	{"ht_name", ALL, K_OFF, "PyHeapTypeObject", "ht_name"},

	{"rt_interpreters_head", ALL, K_OFF, "_PyRuntimeState", "interpreters.head"},
	{"rt_main_thread", ALL, K_OFF, "_PyRuntimeState", "main_thread"},
	/* bpo-46008 / gh-59956: 3.12 moved autoTSSkey from gilstate to the runtime itself. */
	{"rt_tss", 8, 11, K_OFF, "_PyRuntimeState", "gilstate.autoTSSkey"},
	{"rt_tss", 12, 14, K_OFF, "_PyRuntimeState", "autoTSSkey"},
	/* 3.15 has no TSS key for thread states (gilstate keeps them in a thread-local
	 * variable): the BPF walker finds them in the py_tstates map only. */
	/* The main interpreter's GIL: in the runtime up to 3.11; 3.12 gave each interpreter its
	 * own (gh-104210), the main one's lives inside _PyRuntime too. */
	{"rt_gil", 8, 11, K_OFF, "_PyRuntimeState", "ceval.gil"},
	{"rt_gil", 12, LAST, K_OFF, "_PyRuntimeState", "_main_interpreter._gil"},
	{"gil_size", ALL, K_SIZE, "_gil_runtime_state", NULL},
	{"gil_last_holder", ALL, K_OFF, "_gil_runtime_state", "last_holder"},
	{"gil_locked", ALL, K_OFF, "_gil_runtime_state", "locked"},
	{"gil_switch_number", ALL, K_OFF, "_gil_runtime_state", "switch_number"},
	{"tss_initialized", ALL, K_OFF, "Py_tss_t", "_is_initialized"},
	{"tss_key", ALL, K_OFF, "Py_tss_t", "_key"},

	{"is_next", ALL, K_OFF, "PyInterpreterState", "next"},
	{"is_tstate_head", 8, 10, K_OFF, "PyInterpreterState", "tstate_head"},
	{"is_tstate_head", 11, LAST, K_OFF, "PyInterpreterState", "threads.head"},
	{"is_modules", 8, 11, K_OFF, "PyInterpreterState", "modules"},
	{"is_modules", 12, LAST, K_OFF, "PyInterpreterState", "imports.modules"},

	{"ts_next", ALL, K_OFF, "PyThreadState", "next"},
	{"ts_interp", ALL, K_OFF, "PyThreadState", "interp"},
	{"ts_frame", 8, 10, K_OFF, "PyThreadState", "frame"},
	{"ts_cframe", 11, 12, K_OFF, "PyThreadState", "cframe"},
	{"ts_current_frame", 13, LAST, K_OFF, "PyThreadState", "current_frame"},
	{"ts_thread_id", ALL, K_OFF, "PyThreadState", "thread_id"},
	{"ts_native_thread_id", 11, LAST, K_OFF, "PyThreadState", "native_thread_id"},

	{"cf_current_frame", 11, 12, K_OFF, "_PyCFrame", "current_frame"},

	{"f_back", 8, 10, K_OFF, "PyFrameObject", "f_back"},
	{"f_code", 8, 10, K_OFF, "PyFrameObject", "f_code"},
	{"f_lasti", 8, 10, K_OFF, "PyFrameObject", "f_lasti"},
	{"f_locals", 8, 10, K_OFF, "PyFrameObject", "f_locals"},
	{"f_localsplus", 8, 10, K_OFF, "PyFrameObject", "f_localsplus"},

	{"if_previous", 11, LAST, K_OFF, "_PyInterpreterFrame", "previous"},
	{"if_code", 11, 12, K_OFF, "_PyInterpreterFrame", "f_code"},
	{"if_code", 13, LAST, K_OFF, "_PyInterpreterFrame", "f_executable"},
	{"if_instr", 11, 12, K_OFF, "_PyInterpreterFrame", "prev_instr"},
	{"if_instr", 13, LAST, K_OFF, "_PyInterpreterFrame", "instr_ptr"},
	{"if_owner", 11, LAST, K_OFF, "_PyInterpreterFrame", "owner"},
	{"if_is_entry", 11, 11, K_OFF, "_PyInterpreterFrame", "is_entry"},
	{"if_locals", 11, LAST, K_OFF, "_PyInterpreterFrame", "f_locals"},
	{"if_localsplus", 11, LAST, K_OFF, "_PyInterpreterFrame", "localsplus"},

	{"co_flags", ALL, K_OFF, "PyCodeObject", "co_flags"},
	{"co_firstlineno", ALL, K_OFF, "PyCodeObject", "co_firstlineno"},
	{"co_code", 8, 10, K_OFF, "PyCodeObject", "co_code"},
	{"co_filename", ALL, K_OFF, "PyCodeObject", "co_filename"},
	{"co_name", ALL, K_OFF, "PyCodeObject", "co_name"},
	{"co_qualname", 11, LAST, K_OFF, "PyCodeObject", "co_qualname"},
	{"co_lnotab", 8, 9, K_OFF, "PyCodeObject", "co_lnotab"},
	{"co_linetable", 10, LAST, K_OFF, "PyCodeObject", "co_linetable"},
	{"co_code_adaptive", 11, LAST, K_OFF, "PyCodeObject", "co_code_adaptive"},
	{"co_firsttraceable", 11, LAST, K_OFF, "PyCodeObject", "_co_firsttraceable"},
	{"co_argcount", ALL, K_OFF, "PyCodeObject", "co_argcount"},
	{"co_kwonlyargcount", ALL, K_OFF, "PyCodeObject", "co_kwonlyargcount"},
	{"co_nlocals", ALL, K_OFF, "PyCodeObject", "co_nlocals"},
	/* bpo-43693: 3.11 merged varnames, cellvars and freevars into one "localsplus" array
	 * with a parallel array of kinds (CO_FAST_LOCAL / CELL / FREE). */
	{"co_varnames", 8, 10, K_OFF, "PyCodeObject", "co_varnames"},
	{"co_cellvars", 8, 10, K_OFF, "PyCodeObject", "co_cellvars"},
	{"co_freevars", 8, 10, K_OFF, "PyCodeObject", "co_freevars"},
	{"co_nlocalsplus", 11, LAST, K_OFF, "PyCodeObject", "co_nlocalsplus"},
	{"co_localsplusnames", 11, LAST, K_OFF, "PyCodeObject", "co_localsplusnames"},
	{"co_localspluskinds", 11, LAST, K_OFF, "PyCodeObject", "co_localspluskinds"},

	{"unicode_length", ALL, K_OFF, "PyASCIIObject", "length"},
	{"unicode_state", ALL, K_OFF, "PyASCIIObject", "state"},
	{"unicode_kind_bit", ALL, K_BIT, "PyASCIIObject", "state.kind"},
	{"unicode_compact_bit", ALL, K_BIT, "PyASCIIObject", "state.compact"},
	{"unicode_ascii_bit", ALL, K_BIT, "PyASCIIObject", "state.ascii"},
	{"ascii_size", ALL, K_SIZE, "PyASCIIObject", NULL},
	{"compact_size", ALL, K_SIZE, "PyCompactUnicodeObject", NULL},
	{"unicode_data", ALL, K_OFF, "PyUnicodeObject", "data"},

	{"bytes_sval", ALL, K_OFF, "PyBytesObject", "ob_sval"},
	{"tuple_item", ALL, K_OFF, "PyTupleObject", "ob_item"},
	/* gh-101291: 3.12 replaced ob_size by long_value.lv_tag in ints. */
	{"long_lv_tag", 12, LAST, K_OFF, "PyLongObject", "long_value.lv_tag"},
	{"long_digit", 8, 11, K_OFF, "PyLongObject", "ob_digit"},
	{"long_digit", 12, LAST, K_OFF, "PyLongObject", "long_value.ob_digit"},
	{"float_fval", ALL, K_OFF, "PyFloatObject", "ob_fval"},
	{"cell_ref", ALL, K_OFF, "PyCellObject", "ob_ref"},
	{"set_used", ALL, K_OFF, "PySetObject", "used"},

	{"dict_ma_used", ALL, K_OFF, "PyDictObject", "ma_used"},
	{"dict_ma_keys", ALL, K_OFF, "PyDictObject", "ma_keys"},
	{"dict_ma_values", ALL, K_OFF, "PyDictObject", "ma_values"},
	{"dk_size", 8, 10, K_OFF, "PyDictKeysObject", "dk_size"},
	{"dk_log2_size", 11, LAST, K_OFF, "PyDictKeysObject", "dk_log2_size"},
	{"dk_log2_index_bytes", 11, LAST, K_OFF, "PyDictKeysObject", "dk_log2_index_bytes"},
	{"dk_kind", 11, LAST, K_OFF, "PyDictKeysObject", "dk_kind"},
	{"dk_nentries", ALL, K_OFF, "PyDictKeysObject", "dk_nentries"},
	{"dk_indices", ALL, K_OFF, "PyDictKeysObject", "dk_indices"},
	{"dict_entry_size", ALL, K_SIZE, "PyDictKeyEntry", NULL},
	{"dict_uentry_size", 11, LAST, K_SIZE, "PyDictUnicodeEntry", NULL},
	{"dv_values", 11, LAST, K_OFF, "PyDictValues", "values"},

	{"md_dict", ALL, K_OFF, "PyModuleObject", "md_dict"},

	{"tp_base", ALL, K_OFF, "PyTypeObject", "tp_base"},
	{"wr_object", ALL, K_OFF, "PyWeakReference", "wr_object"},
	{"list_item", ALL, K_OFF, "PyListObject", "ob_item"},
	{"set_mask", ALL, K_OFF, "PySetObject", "mask"},
	{"set_table", ALL, K_OFF, "PySetObject", "table"},
	{"setentry_size", ALL, K_SIZE, "setentry", NULL},
	/* bpo-44032 / gh-88198: 3.11 embeds the generator's frame (gi_iframe) and its state. */
	{"gen_frame", 8, 10, K_OFF, "PyGenObject", "gi_frame"},
	{"gen_iframe", 11, LAST, K_OFF, "PyGenObject", "gi_iframe"},
	{"gen_frame_state", 11, LAST, K_OFF, "PyGenObject", "gi_frame_state"},
	{"f_valuestack", 8, 10, K_OFF, "PyFrameObject", "f_valuestack"},
	{"f_stacktop", 8, 9, K_OFF, "PyFrameObject", "f_stacktop"},
	{"f_stackdepth", 10, 10, K_OFF, "PyFrameObject", "f_stackdepth"},
	{"if_stacktop", 11, 13, K_OFF, "_PyInterpreterFrame", "stacktop"},
	{"if_stackpointer", 14, LAST, K_OFF, "_PyInterpreterFrame", "stackpointer"},
	/* In the _asyncio module's own file (--asyncio, found next to the library by default).
	 * 3.14 rewrote the module (per-thread lists of tasks): from 3.14 on its layout comes from
	 * its own debug offsets, the .AsyncioDebug section (user/python/pytasks.c). */
	{"fut_loop", PY_MINOR_MIN, 13, K_OFF, "FutureObj", "fut_loop", true},
	{"fut_state", PY_MINOR_MIN, 13, K_OFF, "FutureObj", "fut_state", true},
	{"task_fut_waiter", PY_MINOR_MIN, 13, K_OFF, "TaskObj", "task_fut_waiter", true},
	{"task_coro", PY_MINOR_MIN, 13, K_OFF, "TaskObj", "task_coro", true},
	{"task_name", PY_MINOR_MIN, 13, K_OFF, "TaskObj", "task_name", true},

	{"dbg_size", 13, LAST, K_SIZE, "_Py_DebugOffsets", NULL},
	{"dbg_version", 13, LAST, K_OFF, "_Py_DebugOffsets", "version"},
	{"dbg_free_threaded", 13, LAST, K_OFF, "_Py_DebugOffsets", "free_threaded"},
};

/* Output order: the members of struct py_offsets, in declaration order. */
static const char *const fields[] = {
	"ob_type",
	"ob_size",
	"tp_name",
	"tp_basicsize",
	"tp_dictoffset",
	"tp_flags",
	"ht_cached_keys",
	"ht_name",
	"rt_interpreters_head",
	"rt_main_thread",
	"rt_tss",
	"rt_gil",
	"gil_size",
	"gil_last_holder",
	"gil_locked",
	"gil_switch_number",
	"tss_initialized",
	"tss_key",
	"is_next",
	"is_tstate_head",
	"is_modules",
	"ts_next",
	"ts_interp",
	"ts_frame",
	"ts_cframe",
	"ts_current_frame",
	"ts_thread_id",
	"ts_native_thread_id",
	"cf_current_frame",
	"f_back",
	"f_code",
	"f_lasti",
	"f_locals",
	"f_localsplus",
	"if_previous",
	"if_code",
	"if_instr",
	"if_owner",
	"if_is_entry",
	"if_locals",
	"if_localsplus",
	"co_flags",
	"co_firstlineno",
	"co_code",
	"co_filename",
	"co_name",
	"co_qualname",
	"co_lnotab",
	"co_linetable",
	"co_code_adaptive",
	"co_firsttraceable",
	"co_argcount",
	"co_kwonlyargcount",
	"co_nlocals",
	"co_varnames",
	"co_cellvars",
	"co_freevars",
	"co_nlocalsplus",
	"co_localsplusnames",
	"co_localspluskinds",
	"unicode_length",
	"unicode_state",
	"unicode_kind_bit",
	"unicode_compact_bit",
	"unicode_ascii_bit",
	"ascii_size",
	"compact_size",
	"unicode_data",
	"bytes_sval",
	"tuple_item",
	"long_lv_tag",
	"long_digit",
	"float_fval",
	"cell_ref",
	"set_used",
	"dict_ma_used",
	"dict_ma_keys",
	"dict_ma_values",
	"dk_size",
	"dk_log2_size",
	"dk_log2_index_bytes",
	"dk_kind",
	"dk_nentries",
	"dk_indices",
	"dict_entry_size",
	"dict_uentry_size",
	"dv_values",
	"md_dict",
	"tp_base",
	"wr_object",
	"list_item",
	"set_mask",
	"set_table",
	"setentry_size",
	"gen_frame",
	"gen_iframe",
	"gen_frame_state",
	"f_valuestack",
	"f_stacktop",
	"f_stackdepth",
	"if_stacktop",
	"if_stackpointer",
	"fut_loop",
	"fut_state",
	"task_fut_waiter",
	"task_coro",
	"task_name",
	"dbg_size",
	"dbg_version",
	"dbg_free_threaded",
};

#define PATH_(name, path, width) path,
static const char *const dbg_paths[PY_DBG_NR] = {PY_DEBUG_FIELDS(PATH_)};
#undef PATH_

/* ---- a name index of the DWARF's types ------------------------------------------------- */

struct type_ent {
	const char *name;
	Dwarf_Off off;
	int is_typedef;
};

static struct type_ent *types;
static size_t ntypes, captypes;
static Dwarf *dbg;

/* DW_AT_declaration set: a forward declaration, not a definition. */
static bool is_decl(Dwarf_Die *die)
{
	Dwarf_Attribute attr;
	bool flag = false;

	return dwarf_attr(die, DW_AT_declaration, &attr) && dwarf_formflag(&attr, &flag) == 0 &&
	       flag;
}

static int add_type(const char *name, Dwarf_Off off, int is_typedef)
{
	if (ntypes == captypes) {
		size_t ncap = captypes ? captypes * 2 : 4096;
		struct type_ent *t = realloc(types, ncap * sizeof(*t));

		if (!t)
			return -ENOMEM;
		types = t;
		captypes = ncap;
	}
	types[ntypes++] = (struct type_ent){name, off, is_typedef};
	return 0;
}

static int cmp_type(const void *a, const void *b)
{
	const struct type_ent *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	/* Keep DWARF order among equal names: the first definition wins. */
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Index every named struct/union definition and typedef at the top level of every CU. */
static int build_index(void)
{
	Dwarf_CU *cu = NULL;
	Dwarf_Die cudie, die;
	uint8_t unit_type;
	Dwarf_Half version;
	int err;

	while (dwarf_get_units(dbg, cu, &cu, &version, &unit_type, &cudie, NULL) == 0) {
		if (dwarf_child(&cudie, &die) != 0)
			continue;
		do {
			int tag = dwarf_tag(&die);
			const char *name;

			if (tag != DW_TAG_structure_type && tag != DW_TAG_union_type &&
			    tag != DW_TAG_typedef)
				continue;
			name = dwarf_diename(&die);
			if (!name)
				continue;
			if (tag != DW_TAG_typedef && is_decl(&die))
				continue;
			err = add_type(name, dwarf_dieoffset(&die), tag == DW_TAG_typedef);
			if (err)
				return err;
		} while (dwarf_siblingof(&die, &die) == 0);
	}
	qsort(types, ntypes, sizeof(*types), cmp_type);
	return ntypes ? 0 : -ENOENT;
}

/* The first index entry for @name with the requested typedef-ness, or NULL. */
static const struct type_ent *find_name(const char *name, int want_typedef)
{
	size_t lo = 0, hi = ntypes;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (strcmp(types[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < ntypes && !strcmp(types[lo].name, name); lo++)
		if (types[lo].is_typedef == want_typedef)
			return &types[lo];
	return NULL;
}

/* Strip typedefs and qualifiers; resolve a struct declaration to its definition. */
static int resolve_type(Dwarf_Die *die, Dwarf_Die *out)
{
	Dwarf_Die cur = *die;
	Dwarf_Attribute attr;
	int depth;

	for (depth = 0; depth < 32; depth++) {
		int tag = dwarf_tag(&cur);

		if (tag == DW_TAG_typedef || tag == DW_TAG_const_type ||
		    tag == DW_TAG_volatile_type || tag == DW_TAG_atomic_type) {
			if (!dwarf_attr(&cur, DW_AT_type, &attr) || !dwarf_formref_die(&attr, &cur))
				return -ENOENT;
			continue;
		}
		if ((tag == DW_TAG_structure_type || tag == DW_TAG_union_type) && is_decl(&cur)) {
			const char *name = dwarf_diename(&cur);
			const struct type_ent *e = name ? find_name(name, 0) : NULL;

			if (!e || !dwarf_offdie(dbg, e->off, &cur))
				return -ENOENT;
			continue;
		}
		*out = cur;
		return 0;
	}
	return -ELOOP;
}

/* The struct a name designates: a typedef first (PyThreadState), else a struct tag. */
static int find_struct(const char *name, Dwarf_Die *out)
{
	const struct type_ent *e = find_name(name, 1);
	Dwarf_Die die;

	if (!e)
		e = find_name(name, 0);
	if (!e || !dwarf_offdie(dbg, e->off, &die))
		return -ENOENT;
	return resolve_type(&die, out);
}

static int member_location(Dwarf_Die *m, uint64_t *bytes)
{
	Dwarf_Attribute attr;
	Dwarf_Word w;
	Dwarf_Op *ops;
	size_t nops;

	if (!dwarf_attr(m, DW_AT_data_member_location, &attr)) {
		*bytes = 0; /* union members and bit-fields described by data_bit_offset */
		return 0;
	}
	if (dwarf_formudata(&attr, &w) == 0) {
		*bytes = w;
		return 0;
	}
	/* Old style: a location expression DW_OP_plus_uconst N. */
	if (dwarf_getlocation(&attr, &ops, &nops) == 0 && nops == 1 &&
	    ops[0].atom == DW_OP_plus_uconst) {
		*bytes = ops[0].number;
		return 0;
	}
	return -EINVAL;
}

/* Bit offset of member @m from the start of its containing struct. */
static int member_bit_location(Dwarf_Die *m, uint64_t *bits)
{
	Dwarf_Attribute attr;
	Dwarf_Word w, bit_off, bit_size, byte_size;
	uint64_t bytes;
	int err;

	if (dwarf_attr(m, DW_AT_data_bit_offset, &attr) && dwarf_formudata(&attr, &w) == 0) {
		*bits = w;
		return 0;
	}
	err = member_location(m, &bytes);
	if (err)
		return err;
	/* DWARF 2/3: DW_AT_bit_offset counts from the most significant bit of the storage unit
	 * (DW_AT_byte_size); on little-endian x86_64 convert to a count from bit 0. */
	if (dwarf_attr(m, DW_AT_bit_offset, &attr) && dwarf_formudata(&attr, &bit_off) == 0) {
		if (!dwarf_attr(m, DW_AT_bit_size, &attr) || dwarf_formudata(&attr, &bit_size) ||
		    !dwarf_attr(m, DW_AT_byte_size, &attr) || dwarf_formudata(&attr, &byte_size))
			return -EINVAL;
		*bits = bytes * 8 + byte_size * 8 - bit_off - bit_size;
		return 0;
	}
	*bits = bytes * 8;
	return 0;
}

/*
 * Find member @name in struct/union @st (searching anonymous members too). On success *@bits
 * is its bit offset from the start of @st and *@member its DIE.
 */
static int find_member(Dwarf_Die *st, const char *name, uint64_t *bits, Dwarf_Die *member)
{
	Dwarf_Die m, sub;
	Dwarf_Attribute attr;
	uint64_t b, inner;

	if (dwarf_child(st, &m) != 0)
		return -ENOENT;
	do {
		const char *mname;

		if (dwarf_tag(&m) != DW_TAG_member)
			continue;
		mname = dwarf_diename(&m);
		if (mname && !strcmp(mname, name)) {
			if (member_bit_location(&m, &b))
				return -EINVAL;
			*bits = b;
			*member = m;
			return 0;
		}
		if (!mname && dwarf_attr(&m, DW_AT_type, &attr) && dwarf_formref_die(&attr, &sub) &&
		    resolve_type(&sub, &sub) == 0 && find_member(&sub, name, &inner, member) == 0) {
			if (member_bit_location(&m, &b))
				return -EINVAL;
			*bits = b + inner;
			return 0;
		}
	} while (dwarf_siblingof(&m, &m) == 0);
	return -ENOENT;
}

/* Bit offset of a dotted member path inside struct @type_name. */
static int path_bits(const char *type_name, const char *path, uint64_t *out)
{
	Dwarf_Die st, member;
	Dwarf_Attribute attr;
	char buf[256], *save = NULL, *tok;
	uint64_t total = 0, bits;
	int err;

	err = find_struct(type_name, &st);
	if (err)
		return err;
	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, path);
	for (tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save)) {
		err = find_member(&st, tok, &bits, &member);
		if (err)
			return err;
		total += bits;
		/* Descend for the next component (not needed after the last one). */
		if (dwarf_attr(&member, DW_AT_type, &attr) && dwarf_formref_die(&attr, &st))
			resolve_type(&st, &st);
	}
	*out = total;
	return 0;
}

static int eval_spec(const struct spec *s, uint64_t *out)
{
	Dwarf_Die st;
	Dwarf_Word size;
	uint64_t bits;
	int err;

	switch (s->kind) {
	case K_SIZE:
		err = find_struct(s->type, &st);
		if (err)
			return err;
		if (dwarf_aggregate_size(&st, &size) != 0)
			return -EINVAL;
		*out = size;
		return 0;
	case K_OFF:
		err = path_bits(s->type, s->path, &bits);
		if (err)
			return err;
		if (bits % 8)
			return -EINVAL; /* a bit-field where a byte offset was expected */
		*out = bits / 8;
		return 0;
	case K_BIT: {
		/* Relative to the struct that holds the bit-field (the path minus its last part). */
		char parent[256];
		const char *dot = strrchr(s->path, '.');
		uint64_t base = 0;

		err = path_bits(s->type, s->path, &bits);
		if (err)
			return err;
		if (dot) {
			snprintf(parent, sizeof(parent), "%.*s", (int)(dot - s->path), s->path);
			err = path_bits(s->type, parent, &base);
			if (err)
				return err;
		}
		*out = bits - base;
		return 0;
	}
	}
	return -EINVAL;
}

/* ---- version ----------------------------------------------------------------------------- */

/* Py_Version (3.11+): read the constant from the file. 0 if absent. */
static unsigned long elf_py_version(Elf *elf)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(elf, scn))) {
		Elf_Data *data;
		size_t i, n;

		if (!gelf_getshdr(scn, &sh) ||
		    (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM))
			continue;
		data = elf_getdata(scn, NULL);
		if (!data || !sh.sh_entsize)
			continue;
		n = sh.sh_size / sh.sh_entsize;
		for (i = 0; i < n; i++) {
			GElf_Sym sym;
			const char *name;
			Elf_Scn *ds;
			GElf_Shdr dsh;
			Elf_Data *dd;

			if (!gelf_getsym(data, i, &sym))
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name || strcmp(name, "Py_Version") || sym.st_shndx == SHN_UNDEF)
				continue;
			ds = elf_getscn(elf, sym.st_shndx);
			if (!ds || !gelf_getshdr(ds, &dsh) || dsh.sh_type == SHT_NOBITS)
				continue;
			dd = elf_getdata(ds, NULL);
			if (!dd || sym.st_value < dsh.sh_addr ||
			    sym.st_value + 4 > dsh.sh_addr + dd->d_size)
				continue;
			return *(const uint32_t *)((const char *)dd->d_buf +
						   (sym.st_value - dsh.sh_addr));
		}
	}
	return 0;
}

/* "python3.9", "libpython3.10.so.1.0" -> minor version; 0 if not found. */
static unsigned int name_minor(const char *path)
{
	const char *base = strrchr(path, '/'), *p;

	base = base ? base + 1 : path;
	p = strstr(base, "python3.");
	if (!p || !isdigit((unsigned char)p[8]))
		return 0;
	return (unsigned int)strtoul(p + 8, NULL, 10);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pyoffsets-gen [--version 3.X] [--asyncio FILE] FILE\n"
		"Print the pyoffsets table entry for the CPython build FILE (a libpython or\n"
		"python executable with DWARF debug info). The _asyncio fields come from the\n"
		"_asyncio extension module, by default the one the build installed next to FILE\n"
		"(PREFIX/lib/python3.X/lib-dynload/_asyncio*.so).\n");
}

/* Open @path's DWARF into the globals (dbg, the type index). 0, or 1 with a message. */
static int open_dwarf(const char *path, int *fd, Elf **elf)
{
	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0) {
		fprintf(stderr, "pyoffsets-gen: %s: %s\n", path, strerror(errno));
		return 1;
	}
	*elf = elf_begin(*fd, ELF_C_READ_MMAP, NULL);
	if (!*elf) {
		fprintf(stderr, "pyoffsets-gen: %s: %s\n", path, elf_errmsg(-1));
		return 1;
	}
	return 0;
}

static int index_dwarf(const char *path, Elf *elf)
{
	dbg = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
	if (!dbg || build_index()) {
		fprintf(stderr, "pyoffsets-gen: %s: no DWARF type information (%s)\n", path,
			dwarf_errmsg(-1));
		return 1;
	}
	return 0;
}

static void close_dwarf(int *fd, Elf **elf)
{
	if (dbg)
		dwarf_end(dbg);
	dbg = NULL;
	if (*elf)
		elf_end(*elf);
	*elf = NULL;
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
	free(types);
	types = NULL;
	ntypes = captypes = 0;
}

/* The _asyncio module a pyenv-style build installs next to @lib (or its bin/python3.X). */
static int find_asyncio(const char *lib, unsigned int minor, char *out, size_t len)
{
	char dir[4096], pat[4200], *slash;
	glob_t g;
	int err = -ENOENT;

	snprintf(dir, sizeof(dir), "%s", lib);
	slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else
		*slash = '\0';
	slash = strrchr(dir, '/');
	if (slash && !strcmp(slash, "/bin"))
		memcpy(slash, "/lib", 5);
	snprintf(pat, sizeof(pat), "%s/python3.%u/lib-dynload/_asyncio.cpython-3%u*.so", dir, minor,
		 minor);
	if (glob(pat, 0, NULL, &g) == 0) {
		if (g.gl_pathc >= 1 && strlen(g.gl_pathv[0]) < len) {
			strcpy(out, g.gl_pathv[0]);
			err = 0;
		}
		globfree(&g);
	}
	return err;
}

/* Evaluate the spec of field @name for @minor from the DWARF open now (its file's specs). */
static int eval_field(const char *name, unsigned int minor, bool asyncio, uint64_t *v)
{
	size_t j;
	int err;

	for (j = 0; j < sizeof(specs) / sizeof(specs[0]); j++) {
		const struct spec *s = &specs[j];

		if (strcmp(s->field, name) || minor < s->lo || minor > s->hi)
			continue;
		if (s->asyncio != asyncio)
			return 0;
		err = eval_spec(s, v);
		if (err)
			fprintf(stderr, "pyoffsets-gen: 3.%u: %s: %s%s%s not found: %s\n", minor,
				name, s->type, s->path ? "." : "", s->path ? s->path : "",
				strerror(-err));
		return err ? -1 : 0;
	}
	return 0;
}

#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

/* Some field of version 3.@minor comes from the _asyncio module's file. */
static bool asyncio_fields(unsigned int minor)
{
	size_t j;

	for (j = 0; j < sizeof(specs) / sizeof(specs[0]); j++)
		if (specs[j].asyncio && minor >= specs[j].lo && minor <= specs[j].hi)
			return true;
	return false;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"version", required_argument, NULL, 'V'},
					     {"asyncio", required_argument, NULL, 'A'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	uint64_t vals[NFIELDS], dbgv[PY_DBG_NR], dbgb[PY_DBG_NR];
	char asyncio_path[4096] = "";
	unsigned int minor = 0;
	Elf *elf = NULL;
	int fd = -1, c, ret = 1;
	size_t i;

	while ((c = getopt_long(argc, argv, "V:A:h", opts, NULL)) != -1) {
		switch (c) {
		case 'V':
			if (sscanf(optarg, "3.%u", &minor) != 1) {
				usage(stderr);
				return 2;
			}
			break;
		case 'A':
			snprintf(asyncio_path, sizeof(asyncio_path), "%s", optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind + 1 != argc) {
		usage(stderr);
		return 2;
	}
	elf_version(EV_CURRENT);
	if (open_dwarf(argv[optind], &fd, &elf))
		goto cleanup;
	if (!minor) {
		unsigned long hex = elf_py_version(elf);

		minor = hex ? (hex >> 16) & 0xff : name_minor(argv[optind]);
	}
	if (minor < PY_MINOR_MIN || minor > PY_MINOR_MAX) {
		fprintf(stderr,
			"pyoffsets-gen: %s: cannot tell a supported version (" PY_VERSIONS "); "
			"use --version\n",
			argv[optind]);
		goto cleanup;
	}
	if (index_dwarf(argv[optind], elf))
		goto cleanup;
	for (i = 0; i < NFIELDS; i++) {
		vals[i] = PYO_NONE;
		if (eval_field(fields[i], minor, false, &vals[i]))
			goto cleanup;
	}
	for (i = 0; i < PY_DBG_NR; i++) {
		dbgv[i] = dbgb[i] = PYO_NONE;
		if (minor >= 13) {
			/* The field, and the size of its struct: the "size" member of its group. */
			char size_path[128];
			const char *dot = strchr(dbg_paths[i], '.');
			struct spec s = {"dbg", 13, LAST, K_OFF, "_Py_DebugOffsets", dbg_paths[i]};
			int err = eval_spec(&s, &dbgv[i]);

			if (!err && dot) {
				snprintf(size_path, sizeof(size_path), "%.*s.size",
					 (int)(dot - dbg_paths[i]), dbg_paths[i]);
				s.path = size_path;
				err = eval_spec(&s, &dbgb[i]);
			}
			if (err || !dot) {
				fprintf(stderr, "pyoffsets-gen: 3.%u: _Py_DebugOffsets.%s: %s\n",
					minor, s.path, strerror(err ? -err : EINVAL));
				goto cleanup;
			}
		}
	}
	/* The fields of the _asyncio module, from its own file (versions that have any). */
	close_dwarf(&fd, &elf);
	if (!asyncio_fields(minor))
		goto print;
	if (!asyncio_path[0] &&
	    find_asyncio(argv[optind], minor, asyncio_path, sizeof(asyncio_path))) {
		fprintf(stderr,
			"pyoffsets-gen: %s: no _asyncio module found next to it "
			"(../python3.%u/lib-dynload); give it with --asyncio FILE\n",
			argv[optind], minor);
		goto cleanup;
	}
	if (open_dwarf(asyncio_path, &fd, &elf) || index_dwarf(asyncio_path, elf))
		goto cleanup;
	for (i = 0; i < NFIELDS; i++)
		if (eval_field(fields[i], minor, true, &vals[i]))
			goto cleanup;

print:
	printf("/* BEGIN 3.%u */\n", minor);
	printf("static const struct py_offsets py_offsets_3_%u = {\n", minor);
	printf("\t.version = 0x03%02x,\n", minor);
	for (i = 0; i < NFIELDS; i++) {
		if (vals[i] == PYO_NONE)
			printf("\t.%s = PYO_NONE,\n", fields[i]);
		else
			printf("\t.%s = %llu,\n", fields[i], (unsigned long long)vals[i]);
	}
	printf("\t.dbg = {");
	for (i = 0; i < PY_DBG_NR; i++) {
		printf("%s", i % 8 ? " " : "\n\t\t");
		if (dbgv[i] == PYO_NONE)
			printf("PYO_NONE,");
		else
			printf("%llu,", (unsigned long long)dbgv[i]);
	}
	printf("\n\t},\n\t.dbg_bound = {");
	for (i = 0; i < PY_DBG_NR; i++) {
		printf("%s", i % 8 ? " " : "\n\t\t");
		if (dbgb[i] == PYO_NONE)
			printf("PYO_NONE,");
		else
			printf("%llu,", (unsigned long long)dbgb[i]);
	}
	printf("\n\t},\n};\n/* END 3.%u */\n", minor);
	ret = 0;
cleanup:
	close_dwarf(&fd, &elf);
	return ret;
}
