// SPDX-License-Identifier: MIT
/*
 * Dynamic symbol lookup from the PT_DYNAMIC segment, as ld.so does it: DT_GNU_HASH (or
 * DT_HASH) finds the candidates, DT_VERSYM/DT_VERDEF pick the version. Working from the
 * dynamic segment rather than section headers means files whose section headers were
 * stripped still work. Every offset read from the file is bounds-checked: the file is the
 * target's, not ours, and may be anything.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "elfsym.h"

struct elfsym {
	const unsigned char *map;
	size_t size;
	const Elf64_Ehdr *eh;
	const Elf64_Phdr *ph;
	int phnum;
	/* From the dynamic segment, as file offsets (0 = absent). */
	uint64_t symtab, strtab, strsz, gnu_hash, sysv_hash, versym, verdef;
	uint64_t verdefnum;
	uint64_t soname; /* offset into strtab, or ~0 */
	uint64_t nsyms;	 /* upper bound on symbol indexes, from the hash table */
	uint16_t type;
};

/* Is [off, off + len) inside the file? */
static bool in_file(const struct elfsym *e, uint64_t off, uint64_t len)
{
	return off <= e->size && len <= e->size - off;
}

/* Translate a virtual address of the file's image into a file offset (0 if unmapped). */
static uint64_t vaddr_to_off(const struct elfsym *e, uint64_t va)
{
	int i;

	for (i = 0; i < e->phnum; i++) {
		const Elf64_Phdr *p = &e->ph[i];

		if (p->p_type == PT_LOAD && va >= p->p_vaddr && va - p->p_vaddr < p->p_filesz)
			return va - p->p_vaddr + p->p_offset;
	}
	return 0;
}

static const char *str_at(const struct elfsym *e, uint64_t idx)
{
	const char *s;

	if (idx >= e->strsz || !in_file(e, e->strtab, e->strsz))
		return NULL;
	s = (const char *)e->map + e->strtab + idx;
	/* The string must end inside the table. */
	if (!memchr(s, '\0', e->strsz - idx))
		return NULL;
	return s;
}

static const Elf64_Sym *sym_at(const struct elfsym *e, uint64_t i)
{
	uint64_t off = e->symtab + i * sizeof(Elf64_Sym);

	if (i >= e->nsyms || !in_file(e, off, sizeof(Elf64_Sym)))
		return NULL;
	return (const Elf64_Sym *)(e->map + off);
}

static uint32_t gnu_hash(const char *s)
{
	uint32_t h = 5381;

	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

static uint32_t sysv_hash(const char *s)
{
	uint32_t h = 0, g;

	for (; *s; s++) {
		h = (h << 4) + (unsigned char)*s;
		g = h & 0xf0000000;
		if (g)
			h ^= g >> 24;
		h &= ~g;
	}
	return h;
}

/* Count the symbols a DT_GNU_HASH table covers: the end of the longest chain. */
static uint64_t gnu_hash_nsyms(const struct elfsym *e)
{
	const uint32_t *hdr, *buckets, *chain;
	uint32_t nbuckets, symoffset, bloom_size, i, max = 0;
	uint64_t off = e->gnu_hash;

	if (!in_file(e, off, 16))
		return 0;
	hdr = (const uint32_t *)(e->map + off);
	nbuckets = hdr[0];
	symoffset = hdr[1];
	bloom_size = hdr[2];
	off += 16 + (uint64_t)bloom_size * 8;
	if (!in_file(e, off, (uint64_t)nbuckets * 4))
		return 0;
	buckets = (const uint32_t *)(e->map + off);
	for (i = 0; i < nbuckets; i++)
		if (buckets[i] > max)
			max = buckets[i];
	if (max < symoffset)
		return symoffset;
	chain = buckets + nbuckets;
	for (;;) {
		uint64_t coff = (const unsigned char *)&chain[max - symoffset] - e->map;

		if (!in_file(e, coff, 4))
			return 0;
		if (chain[max - symoffset] & 1)
			break;
		max++;
	}
	return (uint64_t)max + 1;
}

static int parse_dynamic(struct elfsym *e)
{
	const Elf64_Dyn *d = NULL;
	uint64_t n = 0, i;
	uint64_t symtab = 0, strtab = 0, gnuh = 0, sysvh = 0, versym = 0, verdef = 0;
	int k;

	for (k = 0; k < e->phnum; k++) {
		if (e->ph[k].p_type != PT_DYNAMIC)
			continue;
		if (!in_file(e, e->ph[k].p_offset, e->ph[k].p_filesz))
			return -ENOEXEC;
		d = (const Elf64_Dyn *)(e->map + e->ph[k].p_offset);
		n = e->ph[k].p_filesz / sizeof(*d);
		break;
	}
	if (!d)
		return -ENOENT; /* a static executable: no dynamic symbols */
	e->soname = ~0ULL;
	for (i = 0; i < n && d[i].d_tag != DT_NULL; i++) {
		switch (d[i].d_tag) {
		case DT_SYMTAB:
			symtab = d[i].d_un.d_ptr;
			break;
		case DT_STRTAB:
			strtab = d[i].d_un.d_ptr;
			break;
		case DT_STRSZ:
			e->strsz = d[i].d_un.d_val;
			break;
		case DT_GNU_HASH:
			gnuh = d[i].d_un.d_ptr;
			break;
		case DT_HASH:
			sysvh = d[i].d_un.d_ptr;
			break;
		case DT_VERSYM:
			versym = d[i].d_un.d_ptr;
			break;
		case DT_VERDEF:
			verdef = d[i].d_un.d_ptr;
			break;
		case DT_VERDEFNUM:
			e->verdefnum = d[i].d_un.d_val;
			break;
		case DT_SONAME:
			e->soname = d[i].d_un.d_val;
			break;
		}
	}
	e->symtab = symtab ? vaddr_to_off(e, symtab) : 0;
	e->strtab = strtab ? vaddr_to_off(e, strtab) : 0;
	e->gnu_hash = gnuh ? vaddr_to_off(e, gnuh) : 0;
	e->sysv_hash = sysvh ? vaddr_to_off(e, sysvh) : 0;
	e->versym = versym ? vaddr_to_off(e, versym) : 0;
	e->verdef = verdef ? vaddr_to_off(e, verdef) : 0;
	if (!e->symtab || !e->strtab || (!e->gnu_hash && !e->sysv_hash))
		return -ENOENT;
	if (e->sysv_hash && in_file(e, e->sysv_hash, 8))
		e->nsyms = ((const uint32_t *)(e->map + e->sysv_hash))[1];
	else
		e->nsyms = gnu_hash_nsyms(e);
	return 0;
}

struct elfsym *elfsym__open_fd(int fd)
{
	struct elfsym *e = NULL;
	struct stat st;
	void *map = MAP_FAILED;
	int err;

	if (fstat(fd, &st)) {
		err = errno;
		goto fail;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
		err = ENOEXEC;
		goto fail;
	}
	map = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		err = errno;
		goto fail;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		err = ENOMEM;
		goto fail;
	}
	e->map = map;
	e->size = st.st_size;
	e->eh = map;
	if (memcmp(e->eh->e_ident, ELFMAG, SELFMAG) || e->eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    e->eh->e_ident[EI_DATA] != ELFDATA2LSB || e->eh->e_machine != EM_X86_64 ||
	    e->eh->e_phentsize != sizeof(Elf64_Phdr) ||
	    !in_file(e, e->eh->e_phoff, (uint64_t)e->eh->e_phnum * sizeof(Elf64_Phdr))) {
		err = ENOEXEC;
		goto fail;
	}
	e->ph = (const Elf64_Phdr *)(e->map + e->eh->e_phoff);
	e->phnum = e->eh->e_phnum;
	e->type = e->eh->e_type;
	err = -parse_dynamic(e);
	if (err == ENOENT) {
		/* No dynamic symbols (static executable): lookups simply find nothing. */
		e->nsyms = 0;
		err = 0;
	}
	if (err)
		goto fail;
	return e;
fail:
	if (e)
		free(e);
	if (map != MAP_FAILED)
		munmap(map, st.st_size);
	errno = err;
	return NULL;
}

struct elfsym *elfsym__open(const char *path)
{
	struct elfsym *e;
	int fd, saved;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	e = elfsym__open_fd(fd);
	saved = errno;
	close(fd);
	errno = saved;
	return e;
}

void elfsym__free(struct elfsym *e)
{
	if (!e)
		return;
	munmap((void *)e->map, e->size);
	free(e);
}

/* The name of version index @ndx from DT_VERDEF, or NULL. */
static const char *verdef_name(const struct elfsym *e, uint16_t ndx)
{
	uint64_t off = e->verdef, i;

	if (!off)
		return NULL;
	for (i = 0; i < e->verdefnum && i < 4096; i++) {
		const Elf64_Verdef *vd;
		const Elf64_Verdaux *va;

		if (!in_file(e, off, sizeof(*vd)))
			return NULL;
		vd = (const Elf64_Verdef *)(e->map + off);
		if (vd->vd_ndx == ndx) {
			if (!vd->vd_cnt || !in_file(e, off + vd->vd_aux, sizeof(*va)))
				return NULL;
			va = (const Elf64_Verdaux *)(e->map + off + vd->vd_aux);
			return str_at(e, va->vda_name);
		}
		if (!vd->vd_next)
			break;
		off += vd->vd_next;
	}
	return NULL;
}

/* Does symbol @i (whose name matched) satisfy the version request? */
static bool version_ok(const struct elfsym *e, uint64_t i, const char *version)
{
	uint16_t vs, ndx;
	const char *vname;

	if (!e->versym || !in_file(e, e->versym + i * 2, 2))
		return version == NULL; /* unversioned file: only unversioned requests match */
	vs = *(const uint16_t *)(e->map + e->versym + i * 2);
	ndx = vs & 0x7fff;
	if (!version)
		/* Unversioned reference: the global (1) or default ("@@", not hidden) version. */
		return ndx == 1 || (ndx > 1 && !(vs & 0x8000));
	if (ndx <= 1)
		return false;
	vname = verdef_name(e, ndx);
	return vname && !strcmp(vname, version);
}

static bool sym_matches(const struct elfsym *e, uint64_t i, const char *name, const char *version)
{
	const Elf64_Sym *s = sym_at(e, i);
	const char *sname;
	int type, bind;

	if (!s || s->st_shndx == SHN_UNDEF)
		return false;
	type = ELF64_ST_TYPE(s->st_info);
	bind = ELF64_ST_BIND(s->st_info);
	if (type != STT_FUNC && type != STT_OBJECT && type != STT_GNU_IFUNC && type != STT_NOTYPE)
		return false;
	if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE)
		return false;
	sname = str_at(e, s->st_name);
	return sname && !strcmp(sname, name) && version_ok(e, i, version);
}

static int64_t find_gnu(const struct elfsym *e, const char *name, const char *version)
{
	const uint32_t *hdr, *buckets, *chain;
	uint32_t nbuckets, symoffset, bloom_size, h = gnu_hash(name), i;
	uint64_t off = e->gnu_hash;

	if (!in_file(e, off, 16))
		return -1;
	hdr = (const uint32_t *)(e->map + off);
	nbuckets = hdr[0];
	symoffset = hdr[1];
	bloom_size = hdr[2];
	if (!nbuckets)
		return -1;
	off += 16 + (uint64_t)bloom_size * 8;
	if (!in_file(e, off, (uint64_t)nbuckets * 4))
		return -1;
	buckets = (const uint32_t *)(e->map + off);
	chain = buckets + nbuckets;
	i = buckets[h % nbuckets];
	if (i < symoffset)
		return -1;
	for (;; i++) {
		uint64_t coff = (const unsigned char *)&chain[i - symoffset] - e->map;
		uint32_t h2;

		if (!in_file(e, coff, 4))
			return -1;
		h2 = chain[i - symoffset];
		if ((h | 1) == (h2 | 1) && sym_matches(e, i, name, version))
			return i;
		if (h2 & 1)
			return -1;
	}
}

static int64_t find_sysv(const struct elfsym *e, const char *name, const char *version)
{
	const uint32_t *t;
	uint32_t nbucket, nchain, i, steps = 0;

	if (!in_file(e, e->sysv_hash, 8))
		return -1;
	t = (const uint32_t *)(e->map + e->sysv_hash);
	nbucket = t[0];
	nchain = t[1];
	if (!nbucket || !in_file(e, e->sysv_hash + 8, ((uint64_t)nbucket + nchain) * 4))
		return -1;
	for (i = t[2 + sysv_hash(name) % nbucket]; i && i < nchain && steps++ < nchain;
	     i = t[2 + nbucket + i])
		if (sym_matches(e, i, name, version))
			return i;
	return -1;
}

int elfsym__lookup(const struct elfsym *e, const char *name, const char *version, uint64_t *value,
		   uint64_t *size)
{
	int64_t i = -1;
	const Elf64_Sym *s;

	if (!e->nsyms)
		return -ENOENT;
	if (e->gnu_hash)
		i = find_gnu(e, name, version);
	else if (e->sysv_hash)
		i = find_sysv(e, name, version);
	if (i < 0)
		return -ENOENT;
	s = sym_at(e, i);
	if (value)
		*value = s->st_value;
	if (size)
		*size = s->st_size;
	return 0;
}

int elfsym__bias(const struct elfsym *e, uint64_t map_start, uint64_t map_offset, uint64_t *bias)
{
	long page = sysconf(_SC_PAGESIZE);
	int i;

	for (i = 0; i < e->phnum; i++) {
		const Elf64_Phdr *p = &e->ph[i];
		uint64_t seg_off = p->p_offset & ~((uint64_t)page - 1);

		if (p->p_type != PT_LOAD || seg_off != map_offset)
			continue;
		*bias = map_start - (p->p_vaddr & ~((uint64_t)page - 1));
		return 0;
	}
	return -ENOENT;
}

bool elfsym__is_dyn(const struct elfsym *e)
{
	return e->type == ET_DYN;
}

const char *elfsym__soname(const struct elfsym *e)
{
	return e->soname == ~0ULL ? NULL : str_at(e, e->soname);
}
