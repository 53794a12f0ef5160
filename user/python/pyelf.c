// SPDX-License-Identifier: MIT
/* pyelf: symbol lookups in the ELF files a target process maps (libelf). */
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/procmaps.h"
#include "python/pyelf.h"
#include "base/util.h"

struct pyelf {
	int fd;
	Elf *elf;
};

static struct pyelf *open_fd(int fd)
{
	struct pyelf *e;

	elf_version(EV_CURRENT);
	e = calloc(1, sizeof(*e));
	if (!e) {
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	e->fd = fd;
	e->elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e->elf || elf_kind(e->elf) != ELF_K_ELF) {
		pyelf__free(e);
		errno = ENOEXEC;
		return NULL;
	}
	return e;
}

struct pyelf *pyelf__open_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	return open_fd(fd);
}

struct pyelf *pyelf__open(pid_t pid, const struct procmap *map)
{
	int fd = procmaps__open(pid, map);

	if (fd < 0) {
		errno = -fd;
		return NULL;
	}
	return open_fd(fd);
}

void pyelf__free(struct pyelf *e)
{
	if (!e)
		return;
	if (e->elf)
		elf_end(e->elf);
	if (e->fd >= 0)
		close(e->fd);
	free(e);
}

static Elf_Scn *find_section(Elf *elf, Elf64_Word type)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(elf, scn)))
		if (gelf_getshdr(scn, &sh) && sh.sh_type == type)
			return scn;
	return NULL;
}

bool pyelf__has_symtab(struct pyelf *e)
{
	return find_section(e->elf, SHT_SYMTAB) != NULL;
}

static int scan_symbols(struct pyelf *e, Elf_Scn *scn, const char *const *names, int n,
			uint64_t *values, uint64_t *sizes, int *found)
{
	GElf_Shdr sh;
	Elf_Data *data;
	size_t i, nsyms;
	int j;

	if (!gelf_getshdr(scn, &sh) || !sh.sh_entsize)
		return -EINVAL;
	data = elf_getdata(scn, NULL);
	if (!data)
		return -EINVAL;
	nsyms = sh.sh_size / sh.sh_entsize;
	for (i = 1; i < nsyms && *found < n; i++) {
		GElf_Sym sym;
		const char *name;

		if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF || !sym.st_name)
			continue;
		name = elf_strptr(e->elf, sh.sh_link, sym.st_name);
		if (!name)
			continue;
		for (j = 0; j < n; j++) {
			if (values[j] || strcmp(name, names[j]))
				continue;
			values[j] = sym.st_value;
			if (sizes)
				sizes[j] = sym.st_size;
			(*found)++;
			break;
		}
	}
	return 0;
}

int pyelf__symbols(struct pyelf *e, const char *const *names, int n, bool symtab, uint64_t *values,
		   uint64_t *sizes)
{
	Elf_Scn *scn;
	int found = 0, err;

	memset(values, 0, n * sizeof(*values));
	if (sizes)
		memset(sizes, 0, n * sizeof(*sizes));
	scn = find_section(e->elf, SHT_DYNSYM);
	if (scn) {
		err = scan_symbols(e, scn, names, n, values, sizes, &found);
		if (err)
			return err;
	}
	if (symtab && found < n) {
		scn = find_section(e->elf, SHT_SYMTAB);
		if (scn) {
			err = scan_symbols(e, scn, names, n, values, sizes, &found);
			if (err)
				return err;
		}
	}
	return found;
}

int pyelf__bias(struct pyelf *e, uint64_t start, uint64_t offset, uint64_t *bias)
{
	size_t i, nph;
	GElf_Phdr ph;

	if (elf_getphdrnum(e->elf, &nph))
		return -EINVAL;
	for (i = 0; i < nph; i++) {
		uint64_t page_off;

		if (!gelf_getphdr(e->elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		page_off = ph.p_offset & ~(uint64_t)0xfff;
		if (offset < page_off || offset >= ph.p_offset + ph.p_filesz)
			continue;
		/* File offset p_offset lives at p_vaddr + bias; @offset lives at @start. */
		*bias = start - ph.p_vaddr + (ph.p_offset - offset);
		return 0;
	}
	return -ENOENT;
}

int pyelf__file_offset(struct pyelf *e, uint64_t addr, uint64_t *offset)
{
	size_t i, nph;
	GElf_Phdr ph;

	if (elf_getphdrnum(e->elf, &nph))
		return -EINVAL;
	for (i = 0; i < nph; i++) {
		if (!gelf_getphdr(e->elf, (int)i, &ph) || ph.p_type != PT_LOAD ||
		    addr < ph.p_vaddr || addr >= ph.p_vaddr + ph.p_filesz)
			continue;
		*offset = addr - ph.p_vaddr + ph.p_offset;
		return 0;
	}
	return -ENOENT;
}

int pyelf__read(struct pyelf *e, uint64_t addr, void *buf, size_t len)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(e->elf, scn))) {
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS ||
		    !(sh.sh_flags & SHF_ALLOC))
			continue;
		if (addr < sh.sh_addr || addr + len > sh.sh_addr + sh.sh_size)
			continue;
		d = elf_getdata(scn, NULL);
		if (!d || addr - sh.sh_addr + len > d->d_size)
			return -EINVAL;
		memcpy(buf, (const char *)d->d_buf + (addr - sh.sh_addr), len);
		return 0;
	}
	return -ENOENT;
}

int pyelf__section(struct pyelf *e, const char *name, uint64_t *addr, uint64_t *size)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	size_t shstrndx;
	const char *n;

	if (elf_getshdrstrndx(e->elf, &shstrndx))
		return -EINVAL;
	while ((scn = elf_nextscn(e->elf, scn))) {
		if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_ALLOC))
			continue;
		n = elf_strptr(e->elf, shstrndx, sh.sh_name);
		if (n && !strcmp(n, name)) {
			*addr = sh.sh_addr;
			*size = sh.sh_size;
			return 0;
		}
	}
	return -ENOENT;
}

int pyelf__build_id(struct pyelf *e, char *buf, size_t size)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(e->elf, scn))) {
		Elf_Data *d;
		GElf_Nhdr nh;
		size_t off = 0, noff, doff;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		d = elf_getdata(scn, NULL);
		while (d && (off = gelf_getnote(d, off, &nh, &noff, &doff)) > 0) {
			const unsigned char *id = (const unsigned char *)d->d_buf + doff;
			size_t i;

			if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 ||
			    memcmp((const char *)d->d_buf + noff, "GNU", 4))
				continue;
			if (size < nh.n_descsz * 2 + 1)
				return -ENOSPC;
			for (i = 0; i < nh.n_descsz; i++)
				snprintf(buf + 2 * i, 3, "%02x", id[i]);
			return 0;
		}
	}
	return -ENOENT;
}

struct fde_hits {
	uint64_t start, end;
	uint64_t last_target;
	unsigned int distinct; /* distinct targets inside (not at) the FDE start */
};

/* The binary-search table of .eh_frame_hdr (PT_GNU_EH_FRAME). */
struct eh_table {
	uint64_t hdr;	/* its address */
	uint32_t count; /* entries: (initial location, FDE address), datarel sdata4 each */
	uint8_t *data;	/* count * 8 bytes */
};

/* DW_EH_PE_datarel | DW_EH_PE_sdata4, DW_EH_PE_udata4, DW_EH_PE_pcrel | DW_EH_PE_sdata4 */
#define EH_DATAREL_SDATA4 0x3b
#define EH_UDATA4	  0x03
#define EH_PCREL_SDATA4	  0x1b

static int eh_table_load(struct pyelf *e, struct eh_table *t)
{
	uint8_t head[12];
	size_t n, i;
	GElf_Phdr ph;

	memset(t, 0, sizeof(*t));
	if (elf_getphdrnum(e->elf, &n))
		return -ENOENT;
	for (i = 0; i < n; i++)
		if (gelf_getphdr(e->elf, (int)i, &ph) && ph.p_type == PT_GNU_EH_FRAME)
			break;
	if (i == n)
		return -ENOENT;
	t->hdr = ph.p_vaddr;
	/* version 1, eh_frame_ptr encoding, fde_count encoding, table encoding; eh_frame_ptr
	 * (sdata4 as GCC and lld write it), fde_count */
	if (pyelf__read(e, t->hdr, head, sizeof(head)) || head[0] != 1 || head[2] != EH_UDATA4 ||
	    head[3] != EH_DATAREL_SDATA4 || (head[1] & 0x0f) != 0x0b)
		return -ENOENT;
	memcpy(&t->count, head + 8, 4);
	if (!t->count || t->count > (1u << 24))
		return -ENOENT;
	t->data = malloc((size_t)t->count * 8);
	if (!t->data)
		return -ENOMEM;
	if (pyelf__read(e, t->hdr + 12, t->data, (size_t)t->count * 8)) {
		free(t->data);
		t->data = NULL;
		return -ENOENT;
	}
	return 0;
}

/*
 * The address range [*@fs, *@fe) of the FDE (the whole function or part that GCC described as
 * one) holding @pc: the table's last entry at or below @pc, its FDE read for the length. The
 * FDE's own pc_begin (pcrel sdata4, GCC's "zR" encoding on x86_64) must agree with the
 * table, else the entry is not used.
 */
static int eh_fde_range(struct pyelf *e, const struct eh_table *t, uint64_t pc, uint64_t *fs,
			uint64_t *fe)
{
	uint32_t lo = 0, hi = t->count, len;
	int32_t loc, fde_rel, pc_begin;
	uint32_t pc_range;
	uint64_t start, fde;
	uint8_t buf[16];

	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		memcpy(&loc, t->data + (size_t)mid * 8, 4);
		if (t->hdr + (int64_t)loc <= pc)
			lo = mid;
		else
			hi = mid;
	}
	memcpy(&loc, t->data + (size_t)lo * 8, 4);
	memcpy(&fde_rel, t->data + (size_t)lo * 8 + 4, 4);
	start = t->hdr + (int64_t)loc;
	fde = t->hdr + (int64_t)fde_rel;
	if (start > pc || pyelf__read(e, fde, buf, sizeof(buf)))
		return -ENOENT;
	memcpy(&len, buf, 4);
	memcpy(&pc_begin, buf + 8, 4);
	memcpy(&pc_range, buf + 12, 4);
	if (len == 0xffffffffu || len < 12 || fde + 8 + (int64_t)pc_begin != start)
		return -ENOENT;
	if (pc >= start + pc_range)
		return -ENOENT;
	*fs = start;
	*fe = start + pc_range;
	return 0;
}

int pyelf__cold_part(struct pyelf *e, uint64_t start, uint64_t size, uint64_t *cstart,
		     uint64_t *cend)
{
	struct fde_hits hits[16];
	unsigned int nh = 0, i, best = 0, total = 0;
	struct eh_table t = {0};
	uint8_t *code = NULL;
	size_t k;
	int err;

	if (!size || size > (16 << 20))
		return -EINVAL;
	err = eh_table_load(e, &t);
	if (err)
		return err;
	err = -ENOENT;
	code = malloc(size);
	if (!code) {
		err = -ENOMEM;
		goto cleanup;
	}
	if (pyelf__read(e, start, code, size))
		goto cleanup;
	/* x86-64 rel32 jumps: E9 (jmp) and 0F 80..8F (jcc). Scanning bytes also matches inside
	 * other instructions; such false targets are rare and scattered, real ones cluster. */
	for (k = 0; k + 5 <= size; k++) {
		size_t len;
		int32_t rel;
		uint64_t target, fs, fe;

		if (code[k] == 0xe9)
			len = 5;
		else if (code[k] == 0x0f && k + 6 <= size && (code[k + 1] & 0xf0) == 0x80)
			len = 6;
		else
			continue;
		memcpy(&rel, code + k + len - 4, 4);
		target = start + k + len + (int64_t)rel;
		if (target >= start && target < start + size)
			continue;
		if (eh_fde_range(e, &t, target, &fs, &fe) || target == fs)
			continue;
		for (i = 0; i < nh && hits[i].start != fs; i++)
			;
		if (i == nh) {
			if (nh == ARRAY_SIZE(hits))
				continue;
			hits[nh++] = (struct fde_hits){fs, fe, 0, 0};
		}
		if (hits[i].last_target != target) {
			hits[i].distinct++;
			total++;
		}
		hits[i].last_target = target;
	}
	for (i = 1; i < nh; i++)
		if (hits[i].distinct > hits[best].distinct)
			best = i;
	/* Many jumps into one part (a large function), or nearly all of them (a small one:
	 * 3.14's _PyEval_EvalFrameDefault keeps its instruction bodies in the cold part and
	 * jumps there from 1 KiB of code). */
	if (nh && (hits[best].distinct >= 8 ||
		   (hits[best].distinct >= 4 && hits[best].distinct * 10 >= total * 9))) {
		*cstart = hits[best].start;
		*cend = hits[best].end;
		err = 0;
	}
cleanup:
	free(t.data);
	free(code);
	return err;
}
