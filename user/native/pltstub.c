// SPDX-License-Identifier: MIT
/*
 * PLT stub names. On x86-64 every stub (.plt's lazy ones, .plt.sec's under IBT, .plt.got's
 * for functions whose address is also taken) is one indirect jump, `jmp *disp32(%rip)`
 * (ff 25, after a bnd or endbr64 prefix or not), through a GOT slot; the JUMP_SLOT or
 * GLOB_DAT relocation of that slot names the dynamic symbol. Decoding the jump, rather than
 * counting entries in .rela.plt's order, holds for every one of those layouts.
 */
#include <errno.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "native/pltstub.h"

#define MAX_RELOCS  (1u << 20) /* per relocation section: more is not a real file */
#define MAX_STUBS   (1u << 20)
#define MAX_SYMS    (1u << 22) /* per symbol table */
#define MAX_NAME    256
#define DEFAULT_ENT 16
#define JMP_LEN	    6 /* ff 25 disp32 */

struct got_name {
	uint64_t got;
	const char *name; /* in the ELF's string table; NULL: an IFUNC's, not found yet */
	uint64_t ifunc;	  /* an IRELATIVE slot's resolver (its addend) */
	bool ifunc_slot;  /* an IRELATIVE slot */
	bool global;	  /* named by a global symbol */
};

struct stub {
	uint64_t lo, hi;
	char *name; /* "func@plt", malloc'd */
};

struct pltstubs {
	size_t n, cap;
	struct stub *s;
};

struct got_names {
	size_t n, cap;
	struct got_name *g;
};

static int cmp_got(const void *a, const void *b)
{
	const struct got_name *x = a, *y = b;

	return x->got < y->got ? -1 : x->got > y->got;
}

static int cmp_stub(const void *a, const void *b)
{
	const struct stub *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static const char *got_lookup(const struct got_names *gn, uint64_t got)
{
	size_t lo = 0, hi = gn->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (gn->g[mid].got < got)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < gn->n && gn->g[lo].got == got ? gn->g[lo].name : NULL;
}

/* A symbol a stub may jump to: a function, an IFUNC, or untyped (an old import). */
static bool is_code(const GElf_Sym *sym)
{
	int type = GELF_ST_TYPE(sym->st_info);

	return type == STT_FUNC || type == STT_GNU_IFUNC || type == STT_NOTYPE;
}

/* Add the named GOT slots of RELA section @scn (whose symbols are in a SHT_DYNSYM). */
static int read_relocs(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, struct got_names *gn)
{
	Elf_Scn *symscn = elf_getscn(elf, sh->sh_link);
	Elf_Data *data = elf_getdata(scn, NULL), *syms;
	GElf_Shdr symsh;
	size_t i, n;

	if (!symscn || !gelf_getshdr(symscn, &symsh) || symsh.sh_type != SHT_DYNSYM || !data ||
	    !(syms = elf_getdata(symscn, NULL)))
		return 0;
	n = data->d_size / sizeof(Elf64_Rela);
	if (n > MAX_RELOCS)
		n = MAX_RELOCS;
	for (i = 0; i < n; i++) {
		GElf_Rela rela;
		GElf_Sym sym;
		const char *name;
		unsigned long type;

		if (!gelf_getrela(data, (int)i, &rela))
			break;
		type = GELF_R_TYPE(rela.r_info);
		if (type == R_X86_64_IRELATIVE) {
			/* A local IFUNC (libc's calls to its own memcpy): named by its resolver's
			 * symbol once every symbol table is read. */
			name = NULL;
		} else if (type == R_X86_64_JUMP_SLOT || type == R_X86_64_GLOB_DAT) {
			if (!gelf_getsym(syms, (int)GELF_R_SYM(rela.r_info), &sym) ||
			    !is_code(&sym))
				continue;
			name = elf_strptr(elf, symsh.sh_link, sym.st_name);
			if (!name || !*name)
				continue;
		} else {
			continue;
		}
		if (grow_array(&gn->g, &gn->cap, gn->n + 1, sizeof(*gn->g)))
			return -ENOMEM;
		gn->g[gn->n++] = (struct got_name){.got = rela.r_offset,
						   .name = name,
						   .ifunc = (uint64_t)rela.r_addend,
						   .ifunc_slot = !name};
	}
	return 0;
}

/* Name the IRELATIVE slots of @gn after an IFUNC symbol at their resolver's address (a
 * global one rather than a local or weak alias), from every symbol table of @elf. */
static void name_ifuncs(Elf *elf, struct got_names *gn)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	size_t i, k, n;
	bool pending = false;

	for (k = 0; k < gn->n; k++)
		pending |= gn->g[k].ifunc_slot;
	while (pending && (scn = elf_nextscn(elf, scn))) {
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) ||
		    (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) ||
		    !(data = elf_getdata(scn, NULL)))
			continue;
		n = data->d_size / sizeof(Elf64_Sym);
		for (i = 0; i < n && i < MAX_SYMS; i++) {
			GElf_Sym sym;
			const char *name;
			bool global;

			if (!gelf_getsym(data, (int)i, &sym) ||
			    GELF_ST_TYPE(sym.st_info) != STT_GNU_IFUNC)
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name || !*name)
				continue;
			global = GELF_ST_BIND(sym.st_info) == STB_GLOBAL;
			for (k = 0; k < gn->n; k++) {
				struct got_name *g = &gn->g[k];

				if (g->ifunc_slot && g->ifunc == sym.st_value &&
				    (!g->name || (global && !g->global))) {
					g->name = name;
					g->global = global;
				}
			}
		}
	}
}

static int add_stub(struct pltstubs *ps, uint64_t lo, uint64_t hi, const char *func)
{
	size_t len = strnlen(func, MAX_NAME);
	char *name;

	if (ps->n >= MAX_STUBS)
		return 0;
	if (grow_array(&ps->s, &ps->cap, ps->n + 1, sizeof(*ps->s)))
		return -ENOMEM;
	name = malloc(len + sizeof("@plt"));
	if (!name)
		return -ENOMEM;
	memcpy(name, func, len);
	memcpy(name + len, "@plt", sizeof("@plt"));
	ps->s[ps->n++] = (struct stub){lo, hi, name};
	return 0;
}

/* Name the stubs of executable section @scn, one each @sh_entsize bytes (16 if unset). */
static int read_stubs(Elf_Scn *scn, const GElf_Shdr *sh, const struct got_names *gn,
		      struct pltstubs *ps)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	uint64_t es = sh->sh_entsize >= 8 && sh->sh_entsize <= 64 ? sh->sh_entsize : DEFAULT_ENT;
	size_t size, k, j;
	int err;

	if (!data || !data->d_buf || sh->sh_type != SHT_PROGBITS)
		return 0;
	size = data->d_size < sh->sh_size ? data->d_size : sh->sh_size;
	for (k = 0; k + es <= size; k += es) {
		const unsigned char *p = (const unsigned char *)data->d_buf + k;

		for (j = 0; j + JMP_LEN <= es; j++) {
			int32_t disp;
			const char *func;

			if (p[j] != 0xff || p[j + 1] != 0x25)
				continue;
			memcpy(&disp, p + j + 2, sizeof(disp));
			func = got_lookup(gn, sh->sh_addr + k + j + JMP_LEN + (int64_t)disp);
			if (func &&
			    (err = add_stub(ps, sh->sh_addr + k, sh->sh_addr + k + es, func)))
				return err;
			break;
		}
	}
	return 0;
}

struct pltstubs *pltstubs__new(Elf *elf)
{
	struct pltstubs *ps = calloc(1, sizeof(*ps));
	struct got_names gn = {0};
	GElf_Ehdr eh;
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	size_t shstrndx;
	int err = 0;

	if (!ps)
		return NULL;
	if (!elf || !gelf_getehdr(elf, &eh) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_machine != EM_X86_64 || elf_getshdrstrndx(elf, &shstrndx))
		return ps;
	while (!err && (scn = elf_nextscn(elf, scn)))
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_RELA)
			err = read_relocs(elf, scn, &sh, &gn);
	if (err || !gn.n)
		goto out;
	name_ifuncs(elf, &gn);
	qsort(gn.g, gn.n, sizeof(gn.g[0]), cmp_got);
	scn = NULL;
	while (!err && (scn = elf_nextscn(elf, scn))) {
		const char *name;

		if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_EXECINSTR) ||
		    !(name = elf_strptr(elf, shstrndx, sh.sh_name)))
			continue;
		if (!strcmp(name, ".plt") || !strcmp(name, ".plt.sec") || !strcmp(name, ".plt.got"))
			err = read_stubs(scn, &sh, &gn, ps);
	}
	if (!err && ps->n)
		qsort(ps->s, ps->n, sizeof(ps->s[0]), cmp_stub);
out:
	free(gn.g);
	if (err) {
		pltstubs__free(ps);
		errno = -err;
		return NULL;
	}
	return ps;
}

const char *pltstubs__name(const struct pltstubs *ps, uint64_t vaddr)
{
	size_t lo = 0, hi = ps ? ps->n : 0;

	/* The last stub starting at or below the address. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ps->s[mid].lo <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo && vaddr < ps->s[lo - 1].hi ? ps->s[lo - 1].name : NULL;
}

size_t pltstubs__count(const struct pltstubs *ps)
{
	return ps ? ps->n : 0;
}

void pltstubs__free(struct pltstubs *ps)
{
	size_t i;

	if (!ps)
		return;
	for (i = 0; i < ps->n; i++)
		free(ps->s[i].name);
	free(ps->s);
	free(ps);
}
