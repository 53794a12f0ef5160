// SPDX-License-Identifier: MIT
/*
 * Symbolization with libdw: DWARF scopes give the inline chain (innermost first) with call
 * sites; without DWARF the ELF symbol table names the function; without either the frame is
 * named after its module.
 */
#include <dwarf.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <elfutils/libdw.h>

#include "base/bmap.h"
#include "base/strpool.h"
#include "native/pltstub.h"
#include "native/symbolize.h"
#include "base/util.h"

/* From libstdc++ (the Itanium C++ ABI demangler). */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define MAX_INLINE 32

/* What we remember about a Dwfl_Module, hung on its userdata slot. */
struct modinfo {
	uint64_t key_id;  /* interned identity: build-id, else path */
	const char *path; /* interned */
	const char *base; /* "[libc.so.6]": name for frames without a symbol */
	struct modinfo *next;
};

struct cache_key {
	uint64_t key_id;
	uint64_t offset; /* looked-up address - module start */
};

struct cache_val {
	int n;
	struct frame frames[];
};

/*
 * The functions of one compilation unit by address, built the first time an address falls
 * in it: finding a pc's function is then a binary search instead of dwarf_getscopes()'s
 * walk over every DIE of the CU (tens of thousands in an interpreter's ceval.c).
 */
struct fnrange {
	Dwarf_Addr lo, hi; /* DWARF addresses */
	Dwarf_Off die;	   /* the DW_TAG_subprogram */
};

struct fnindex {
	size_t n;
	struct fnrange r[];
};

/*
 * The symbols of a large module by address: libdw's dwfl_module_addrinfo() looks through
 * the whole table at each call (2.3 ms a call in Debian's libtorch_cpu, 35,000 dynamic
 * symbols), so each module with at least SYMINDEX_MIN symbols gets this index, built once
 * per build-id (tests/unit/test_symbolize.c checks it names addresses as libdw does).
 * Offsets are from the module's start, so that every process mapping it shares the index.
 */
#define SYMINDEX_MIN 1000

struct symentry {
	uint64_t off, size;
	uint64_t maxend; /* the highest end (off + size) of this symbol and those before it */
	uint32_t idx;	 /* in the module's symbol table (dwfl_module_getsym_info) */
	uint8_t rank;	 /* binding: 2 global, 1 weak, 0 other */
};

/*
 * libdw's answers for addresses between functions: no sized symbol holds them, so
 * the index cannot name them and libdw walks its whole table (2.3 ms in libtorch_cpu),
 * for each new address. Its answer there depends only on the symbols at or below the
 * address (the same for every address between two symbols of the index), on which of them
 * hold it (none, past every symbol's end: the entry's maxend) and on the ELF section of the
 * address (a sizeless symbol names only addresses of its own section). So one answer per
 * (module, gap, section) is kept: value (uintptr_t) interned name, GAP_NONE for none.
 */
struct gap_key {
	uint64_t key_id;
	uint64_t entry; /* the index's last entry at or below the address, or GAP_BEFORE_FIRST */
	uint64_t scn;	/* the address's section, as libdw finds it */
};
#define GAP_NONE	 1
#define GAP_BEFORE_FIRST UINT64_MAX /* the gap below the first entry (.init, .plt) */

#define PLTS_NONE 1 /* a module whose stubs could not be read */

/*
 * A sizeless symbol (an assembly label): in a gap, libdw names an address by one only if it
 * is at or below the address in the address's section. A module's few labels are kept so
 * that a gap without one below in its section is answered "none" without asking libdw.
 */
#define SYMINDEX_LABELS	  64
#define LABEL_ANY_SECTION SHN_UNDEF /* a label whose section cannot be compared: any */
#define LABEL_ABSOLUTE	  SHN_ABS   /* libdw names by it only the address it has */

struct symlabel {
	uint64_t off;	/* from the module's start (0: below it) */
	uint32_t shndx; /* its section, or LABEL_ANY_SECTION */
};

struct symindex {
	size_t n;	/* 0: not indexed (a small module: libdw searches it) */
	size_t nlabels; /* more than SYMINDEX_LABELS: every gap is asked of libdw */
	uint64_t below; /* the highest end, past the start, of a sized symbol below the start */
	struct symlabel labels[SYMINDEX_LABELS];
	struct symentry e[];
};

struct symbolizer {
	struct strpool *strings;
	struct bmap *module_ids; /* identity string -> key_id */
	struct bmap *cache;	 /* cache_key -> (uintptr_t) struct cache_val * */
	struct bmap *cuindex;	 /* (key_id, CU offset) -> (uintptr_t) struct fnindex * */
	struct bmap *symindex;	 /* key_id -> (uintptr_t) struct symindex * */
	struct bmap *gaps;	 /* struct gap_key -> interned name or GAP_NONE */
	struct bmap *plts;	 /* key_id -> (uintptr_t) struct pltstubs *, PLTS_NONE */
	struct modinfo *modinfos;
};

static const struct frame unknown_frame = {.kind = FRAME_NATIVE, .func = "[unknown]"};

struct symbolizer *symbolizer__new(void)
{
	struct symbolizer *sz = calloc(1, sizeof(*sz));

	if (!sz)
		return NULL;
	sz->strings = strpool__new();
	sz->module_ids = bmap__new();
	sz->cache = bmap__new();
	sz->cuindex = bmap__new();
	sz->symindex = bmap__new();
	sz->gaps = bmap__new();
	sz->plts = bmap__new();
	if (!sz->strings || !sz->module_ids || !sz->cache || !sz->cuindex || !sz->symindex ||
	    !sz->gaps || !sz->plts) {
		symbolizer__free(sz);
		return NULL;
	}
	return sz;
}

static int free_plts(const void *key, size_t len, uint64_t *value, void *arg)
{
	(void)key, (void)len, (void)arg;
	if (*value != PLTS_NONE)
		pltstubs__free((struct pltstubs *)(uintptr_t)*value);
	return 0;
}

void symbolizer__free(struct symbolizer *sz)
{
	struct modinfo *mi, *next;

	if (!sz)
		return;
	bmap__free_values(sz->cache);
	bmap__free(sz->cache);
	bmap__free_values(sz->cuindex);
	bmap__free(sz->cuindex);
	bmap__free_values(sz->symindex);
	bmap__free(sz->symindex);
	bmap__free(sz->gaps);
	if (sz->plts)
		bmap__for_each(sz->plts, free_plts, NULL);
	bmap__free(sz->plts);
	bmap__free(sz->module_ids);
	for (mi = sz->modinfos; mi; mi = next) {
		next = mi->next;
		free(mi);
	}
	strpool__free(sz->strings);
	free(sz);
}

char *symbolize_demangle(const char *name)
{
	int status = 0;
	char *out;

	if (!name || strncmp(name, "_Z", 2))
		return NULL;
	out = __cxa_demangle(name, NULL, NULL, &status);
	if (status) {
		free(out);
		return NULL;
	}
	return out;
}

static struct modinfo *module_info(struct symbolizer *sz, Dwfl_Module *mod, Dwarf_Addr *start)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	struct modinfo *mi;
	char ident[512], base[512];
	const char *name, *slash;
	void **ud;
	uint64_t *id;
	int len, i, off = 0;

	name = dwfl_module_info(mod, &ud, start, NULL, NULL, NULL, NULL, NULL);
	if (*ud)
		return *ud;
	mi = calloc(1, sizeof(*mi));
	if (!mi)
		return NULL;
	len = dwfl_module_build_id(mod, &bits, &vaddr);
	if (len > 0) {
		off = snprintf(ident, sizeof(ident), "build-id:");
		for (i = 0; i < len && off < (int)sizeof(ident) - 3; i++)
			off += snprintf(ident + off, sizeof(ident) - off, "%02x", bits[i]);
		/* Identical files at different paths share entries; that is fine. */
	} else {
		snprintf(ident, sizeof(ident), "path:%s", name ? name : "?");
	}
	id = bmap__upsert(sz->module_ids, ident, strlen(ident), bmap__size(sz->module_ids) + 1,
			  NULL);
	if (!id) {
		free(mi);
		return NULL;
	}
	mi->key_id = *id;
	mi->path = strpool__intern(sz->strings, name ? name : "?");
	slash = name ? strrchr(name, '/') : NULL;
	if (name && name[0] == '[') /* "[vdso]": already a pseudo-module's name */
		snprintf(base, sizeof(base), "%s", name);
	else
		snprintf(base, sizeof(base), "[%s]", slash ? slash + 1 : name ? name : "unknown");
	mi->base = strpool__intern(sz->strings, base);
	mi->next = sz->modinfos;
	sz->modinfos = mi;
	*ud = mi;
	return mi;
}

static int symentry_cmp(const void *a, const void *b)
{
	const struct symentry *x = a, *y = b;

	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank > y->rank ? -1 : 1; /* the best binding first */
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The symbols libdw would consider for an address: defined, neither section, file nor TLS. */
static bool symbol_counts(const GElf_Sym *sym)
{
	int type = GELF_ST_TYPE(sym->st_info);

	return sym->st_shndx != SHN_UNDEF && type != STT_SECTION && type != STT_FILE &&
	       type != STT_TLS;
}

/* Build the index of @mod (module key @key_id, start @start). NULL on no memory. */
static struct symindex *build_symindex(Dwfl_Module *mod, Dwarf_Addr start)
{
	int i, nsym = dwfl_module_getsymtab(mod);
	struct symindex *si;
	GElf_Sym sym;
	GElf_Addr addr;
	uint64_t below = 0; /* the highest end past @start of a symbol below it */
	Elf *elf, *main_elf = dwfl_module_getelf(mod, &(GElf_Addr){0});
	GElf_Word shndx;
	size_t n = 0, j;

	si = malloc(sizeof(*si) + (nsym >= SYMINDEX_MIN ? (size_t)nsym : 0) * sizeof(si->e[0]));
	if (!si)
		return NULL;
	si->nlabels = 0;
	for (i = 1; nsym >= SYMINDEX_MIN && i < nsym; i++) {
		const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, &elf, NULL);
		int bind = GELF_ST_BIND(sym.st_info);

		if (!name || !*name || !symbol_counts(&sym))
			continue;
		if (!sym.st_size && si->nlabels++ < SYMINDEX_LABELS)
			si->labels[si->nlabels - 1] = (struct symlabel){
				.off = addr > start ? addr - start : 0,
				/* An absolute one names its own address only; one of another
				 * file's table (whose sections are not the main file's), any. */
				.shndx = shndx >= SHN_LORESERVE ? LABEL_ABSOLUTE
					 : elf != main_elf	? LABEL_ANY_SECTION
								: shndx,
			};
		if (addr < start) {
			if (addr + sym.st_size > start && addr + sym.st_size - start > below)
				below = addr + sym.st_size - start;
			continue;
		}
		si->e[n++] = (struct symentry){
			.off = addr - start,
			.size = sym.st_size,
			.idx = (uint32_t)i,
			.rank = bind == STB_GLOBAL ? 2
				: bind == STB_WEAK ? 1
						   : 0,
		};
	}
	qsort(si->e, n, sizeof(si->e[0]), symentry_cmp);
	for (j = 0; j < n; j++) {
		uint64_t end = si->e[j].off + si->e[j].size, prev = j ? si->e[j - 1].maxend : below;

		si->e[j].maxend = end > prev ? end : prev;
	}
	si->n = n;
	si->below = below;
	return si;
}

/* libdw's name for @addr in @mod (its walk over the whole symbol table), NULL for none. */
static const char *libdw_symbol(Dwfl_Module *mod, uint64_t addr)
{
	GElf_Sym sym;

	return dwfl_module_addrinfo(mod, addr, &(GElf_Off){0}, &sym, NULL, NULL, NULL);
}

/* The index of the section holding @addr, found as libdw finds it (the first in the file's
 * order), SHN_ABS for none, SHN_UNDEF when the module's ELF cannot be read. */
static uint64_t section_of(Dwfl_Module *mod, uint64_t addr)
{
	GElf_Addr bias;
	Elf *elf = dwfl_module_getelf(mod, &bias);
	Elf_Scn *scn = NULL;
	GElf_Shdr shdr;

	if (!elf)
		return SHN_UNDEF;
	while ((scn = elf_nextscn(elf, scn)))
		if (gelf_getshdr(scn, &shdr) && addr - bias >= shdr.sh_addr &&
		    addr - bias - shdr.sh_addr < shdr.sh_size)
			return elf_ndxscn(scn);
	return SHN_ABS;
}

/* Is there a label of @si at or below offset @off that libdw could name section @scn's
 * address by (or might there be: more labels than kept)? */
static bool label_below(const struct symindex *si, uint64_t scn, uint64_t off)
{
	size_t i;

	if (si->nlabels > SYMINDEX_LABELS)
		return true;
	for (i = 0; i < si->nlabels; i++) {
		const struct symlabel *l = &si->labels[i];

		if (l->shndx == LABEL_ABSOLUTE
			    ? l->off == off
			    : l->off <= off && (l->shndx == LABEL_ANY_SECTION || l->shndx == scn))
			return true;
	}
	return false;
}

/* libdw's name for @addr (offset @off in the module of index @si), in the gap after entry
 * @entry of module @key_id's index (GAP_BEFORE_FIRST: before its first entry). */
static const char *gap_symbol(struct symbolizer *sz, Dwfl_Module *mod, uint64_t key_id,
			      const struct symindex *si, uint64_t entry, uint64_t addr,
			      uint64_t off)
{
	struct gap_key k = {key_id, entry, section_of(mod, addr)};
	const char *name;
	uint64_t *slot;
	int inserted;

	if (k.scn == SHN_UNDEF)
		return libdw_symbol(mod, addr);
	/* No sized symbol holds it (a gap): libdw's answer is a label, if one is below it in its
	 * section, else none (its walk is 2.3 ms in libtorch_cpu, whose text has no label). */
	if (!label_below(si, k.scn, off))
		return NULL;
	slot = bmap__upsert(sz->gaps, &k, sizeof(k), 0, &inserted);
	if (slot && *slot)
		return *slot == GAP_NONE ? NULL : (const char *)(uintptr_t)*slot;
	name = libdw_symbol(mod, addr);
	if (slot) {
		const char *kept = name ? strpool__intern(sz->strings, name) : NULL;

		if (kept || !name)
			*slot = kept ? (uintptr_t)kept : GAP_NONE;
	}
	return name;
}

const char *symbolize_symbol(struct symbolizer *sz, Dwfl_Module *mod, uint64_t addr)
{
	struct symindex *si;
	struct modinfo *mi;
	Dwarf_Addr start;
	GElf_Sym sym;
	GElf_Addr a;
	uint64_t *slot, off;
	size_t lo = 0, hi;
	int inserted;

	mi = module_info(sz, mod, &start);
	if (!mi || addr < start)
		goto libdw;
	slot = bmap__upsert(sz->symindex, &mi->key_id, sizeof(mi->key_id), 0, &inserted);
	if (!slot)
		goto libdw;
	if (!*slot)
		*slot = (uintptr_t)build_symindex(mod, start);
	si = (struct symindex *)(uintptr_t)*slot;
	if (!si || !si->n)
		goto libdw;
	/* The last symbol at or below the address, then the first (best bound) at its address. */
	off = addr - start;
	hi = si->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (si->e[mid].off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* Below the first symbol (.init, the PLT: a sample in a PLT stub), past what a symbol
	 * below the start covers: a gap too. */
	if (!lo)
		return off >= si->below
			       ? gap_symbol(sz, mod, mi->key_id, si, GAP_BEFORE_FIRST, addr, off)
			       : libdw_symbol(mod, addr);
	for (hi = lo - 1; hi > 0 && si->e[hi - 1].off == si->e[lo - 1].off; hi--)
		;
	/* A sized symbol holding the address: libdw's answer too (the closest such one). */
	if (si->e[hi].size && off < si->e[hi].off + si->e[hi].size)
		return dwfl_module_getsym_info(mod, (int)si->e[hi].idx, &sym, &a, NULL, NULL, NULL);
	/* Past every symbol's end, and not at a symbol (an absolute one names only its own
	 * address): a gap, where libdw's answer is kept. Any other case is left to libdw. */
	if (off >= si->e[lo - 1].maxend && off > si->e[lo - 1].off)
		return gap_symbol(sz, mod, mi->key_id, si, lo - 1, addr, off);
libdw:
	return libdw_symbol(mod, addr);
}

/*
 * The name of the PLT stub ("memcpy@plt") holding @addr in module @mi, whose table is read
 * at the module's first such lookup; NULL for none.
 */
static const char *plt_stub_name(struct symbolizer *sz, Dwfl_Module *mod, const struct modinfo *mi,
				 Dwarf_Addr addr)
{
	GElf_Addr bias;
	Elf *elf = dwfl_module_getelf(mod, &bias);
	uint64_t *slot;
	int inserted;

	if (!elf)
		return NULL;
	slot = bmap__upsert(sz->plts, &mi->key_id, sizeof(mi->key_id), 0, &inserted);
	if (!slot)
		return NULL;
	if (!*slot) {
		struct pltstubs *ps = pltstubs__new(elf);

		*slot = ps ? (uintptr_t)ps : PLTS_NONE;
	}
	if (*slot == PLTS_NONE)
		return NULL;
	return pltstubs__name((struct pltstubs *)(uintptr_t)*slot, addr - bias);
}

/* Name of a subprogram or inlined-subroutine DIE: demangled linkage name, else DW_AT_name. */
static const char *die_func_name(struct symbolizer *sz, Dwarf_Die *die)
{
	Dwarf_Attribute attr;
	const char *name = NULL;
	char *dem;

	if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) ||
	    dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr))
		name = dwarf_formstring(&attr);
	if (name && (dem = symbolize_demangle(name))) {
		name = strpool__intern(sz->strings, dem);
		free(dem);
		return name;
	}
	if (!name && dwarf_attr_integrate(die, DW_AT_name, &attr))
		name = dwarf_formstring(&attr);
	return name ? strpool__intern(sz->strings, name) : NULL;
}

/* The call site (file, line) of an inlined-subroutine DIE. */
static void call_site(struct symbolizer *sz, Dwarf_Die *cu, Dwarf_Die *die, const char **file,
		      int *line)
{
	Dwarf_Attribute attr;
	Dwarf_Files *files;
	Dwarf_Word v;
	size_t nfiles;
	const char *f;

	*file = NULL;
	*line = 0;
	if (dwarf_attr(die, DW_AT_call_line, &attr) && !dwarf_formudata(&attr, &v))
		*line = (int)v;
	if (dwarf_attr(die, DW_AT_call_file, &attr) && !dwarf_formudata(&attr, &v) &&
	    !dwarf_getsrcfiles(cu, &files, &nfiles) && v < nfiles) {
		f = dwarf_filesrc(files, v, NULL, NULL);
		*file = f ? strpool__intern(sz->strings, f) : NULL;
	}
}

struct fnvec {
	struct fnrange *r;
	size_t n, cap;
};

/* Collect the subprograms with code under @die (namespaces and classes included). */
static int collect_functions(Dwarf_Die *die, struct fnvec *v, int depth)
{
	Dwarf_Addr base, lo, hi;
	Dwarf_Die child;
	ptrdiff_t off;
	int tag;

	if (depth > 16 || dwarf_child(die, &child) != 0)
		return 0;
	do {
		tag = dwarf_tag(&child);
		if (tag == DW_TAG_subprogram) {
			for (off = 0; (off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0;) {
				if (lo >= hi)
					continue;
				if (grow_array(&v->r, &v->cap, v->n + 1, sizeof(*v->r)))
					return -ENOMEM;
				v->r[v->n++] = (struct fnrange){lo, hi, dwarf_dieoffset(&child)};
			}
		} else if (tag == DW_TAG_namespace || tag == DW_TAG_class_type ||
			   tag == DW_TAG_structure_type || tag == DW_TAG_union_type) {
			if (collect_functions(&child, v, depth + 1))
				return -ENOMEM;
		}
	} while (dwarf_siblingof(&child, &child) == 0);
	return 0;
}

static int cmp_fnrange(const void *a, const void *b)
{
	const struct fnrange *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The function index of the CU @cu of module @mi, built on first use; NULL on ENOMEM. */
static struct fnindex *cu_functions(struct symbolizer *sz, const struct modinfo *mi, Dwarf_Die *cu)
{
	struct {
		uint64_t key_id, cu;
	} key = {mi->key_id, dwarf_dieoffset(cu)};
	struct fnvec v = {};
	struct fnindex *ix;
	uint64_t *slot;
	int inserted;

	slot = bmap__upsert(sz->cuindex, &key, sizeof(key), 0, &inserted);
	if (!slot)
		return NULL;
	if (!inserted && *slot)
		return (struct fnindex *)(uintptr_t)*slot;
	if (collect_functions(cu, &v, 0)) {
		free(v.r);
		return NULL;
	}
	qsort(v.r, v.n, sizeof(*v.r), cmp_fnrange);
	ix = malloc(sizeof(*ix) + v.n * sizeof(ix->r[0]));
	if (ix) {
		ix->n = v.n;
		memcpy(ix->r, v.r, v.n * sizeof(ix->r[0]));
		*slot = (uintptr_t)ix;
	}
	free(v.r);
	return ix;
}

/*
 * The DIEs at DWARF address @a, outermost first: the function, then each inlined call
 * inside it. Return their number in @chain (at most @max), 0 if no indexed function of the
 * CU contains @a.
 */
static int die_chain(struct symbolizer *sz, const struct modinfo *mi, Dwarf_Die *cu, Dwarf_Addr a,
		     Dwarf_Die *chain, int max)
{
	struct fnindex *ix = cu_functions(sz, mi, cu);
	size_t lo = 0, hi = ix ? ix->n : 0, mid;
	Dwarf_Die cur, child;
	bool found;
	int n = 0, tag;

	/* The last range starting at or below @a. */
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (ix->r[mid].lo <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || a >= ix->r[lo - 1].hi ||
	    !dwarf_offdie(dwarf_cu_getdwarf(cu->cu), ix->r[lo - 1].die, &cur))
		return 0;
	chain[n++] = cur;
	/* Down through the blocks that contain @a, noting each inlined call. */
	do {
		found = false;
		if (dwarf_child(&cur, &child) != 0)
			break;
		do {
			tag = dwarf_tag(&child);
			if ((tag == DW_TAG_lexical_block || tag == DW_TAG_inlined_subroutine ||
			     tag == DW_TAG_try_block || tag == DW_TAG_catch_block) &&
			    dwarf_haspc(&child, a) == 1) {
				if (tag == DW_TAG_inlined_subroutine && n < max)
					chain[n++] = child;
				cur = child;
				found = true;
				break;
			}
		} while (dwarf_siblingof(&child, &child) == 0);
	} while (found);
	return n;
}

/* Resolve @addr (already adjusted) in @mod into @out (room for MAX_INLINE). */
static int resolve(struct symbolizer *sz, Dwfl_Module *mod, const struct modinfo *mi,
		   Dwarf_Addr addr, struct frame *out)
{
	Dwarf_Die *cu, *scopes = NULL;
	Dwarf_Addr bias;
	Dwfl_Line *ln;
	const char *file = NULL, *sname;
	char *dem;
	int line = 0, n = 0, ns, i, tag;

	ln = dwfl_module_getsrc(mod, addr);
	if (ln) {
		file = dwfl_lineinfo(ln, NULL, &line, NULL, NULL, NULL);
		file = file ? strpool__intern(sz->strings, file) : NULL;
	}
	cu = dwfl_module_addrdie(mod, addr, &bias);
	if (cu) {
		Dwarf_Die chain[MAX_INLINE];
		int nc = die_chain(sz, mi, cu, addr - bias, chain, MAX_INLINE);

		/* Innermost first: the deepest inlined call, out to the function. */
		for (i = nc - 1; i >= 0 && n < MAX_INLINE; i--) {
			out[n] = (struct frame){.kind = FRAME_NATIVE, .module = mi->path};
			out[n].func = die_func_name(sz, &chain[i]);
			out[n].file = file;
			out[n].line = line;
			if (!out[n].func)
				out[n].func = "[unknown]";
			n++;
			if (i > 0)
				call_site(sz, cu, &chain[i], &file, &line);
		}
	}
	/* Not found in the index (a function nested in another's DIE): the general walk. */
	ns = cu && !n ? dwarf_getscopes(cu, addr - bias, &scopes) : 0;
	if (ns > 0) {
		/*
		 * dwarf_getscopes() follows an inlined instance to its abstract origin's scopes;
		 * the physical nesting (inlined call -> the function it was inlined into) comes
		 * from the innermost DIE's parents.
		 */
		Dwarf_Die inner = scopes[0];

		free(scopes);
		scopes = NULL;
		ns = dwarf_getscopes_die(&inner, &scopes);
	}
	for (i = 0; i < ns && n < MAX_INLINE; i++) {
		tag = dwarf_tag(&scopes[i]);
		if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram)
			continue;
		out[n] = (struct frame){.kind = FRAME_NATIVE, .module = mi->path};
		out[n].func = die_func_name(sz, &scopes[i]);
		out[n].file = file;
		out[n].line = line;
		if (!out[n].func)
			out[n].func = "[unknown]";
		n++;
		if (tag == DW_TAG_subprogram)
			break;
		call_site(sz, cu, &scopes[i], &file, &line);
	}
	free(scopes);
	if (n == 0) {
		/* No DWARF for the address: the ELF symbol table names it. */
		sname = symbolize_symbol(sz, mod, addr);
		if (!sname)
			sname = plt_stub_name(sz, mod, mi, addr);
		out[0] = (struct frame){.kind = FRAME_NATIVE, .module = mi->path};
		out[0].file = file;
		out[0].line = line;
		if (sname && (dem = symbolize_demangle(sname))) {
			out[0].func = strpool__intern(sz->strings, dem);
			free(dem);
		} else {
			out[0].func = sname ? strpool__intern(sz->strings, sname) : mi->base;
		}
		n = 1;
	}
	for (i = 0; i < n; i++)
		if (!out[i].func)
			return -ENOMEM;
	return n;
}

int symbolizer__lookup(struct symbolizer *sz, Dwfl_Module *mod, uint64_t pc, bool activation,
		       const struct frame **frames, int *n)
{
	struct frame tmp[MAX_INLINE];
	struct cache_val *val;
	struct cache_key key;
	struct modinfo *mi;
	Dwarf_Addr start, addr = activation || !pc ? pc : pc - 1;
	uint64_t *slot;
	int inserted, cnt;

	if (!mod || !(mi = module_info(sz, mod, &start))) {
		*frames = &unknown_frame;
		*n = 1;
		return 0;
	}
	memset(&key, 0, sizeof(key));
	key.key_id = mi->key_id;
	key.offset = addr - start;
	slot = bmap__upsert(sz->cache, &key, sizeof(key), 0, &inserted);
	if (!slot)
		return -ENOMEM;
	if (!inserted && *slot) {
		val = (struct cache_val *)(uintptr_t)*slot;
		*frames = val->frames;
		*n = val->n;
		return 0;
	}
	cnt = resolve(sz, mod, mi, addr, tmp);
	if (cnt < 0)
		return cnt;
	val = malloc(sizeof(*val) + cnt * sizeof(val->frames[0]));
	if (!val)
		return -ENOMEM;
	val->n = cnt;
	memcpy(val->frames, tmp, cnt * sizeof(tmp[0]));
	*slot = (uintptr_t)val;
	*frames = val->frames;
	*n = cnt;
	return 0;
}
