/* SPDX-License-Identifier: MIT */
/*
 * elfsym: look up dynamic symbols (.dynsym) of an ELF64 file on disk, honouring GNU symbol
 * versioning, the way the dynamic loader would. The injector uses it to find dlopen/dlerror
 * in the *target's* libc (which may be another libc than ours), to find the agent's entry
 * point, and to find the address ranges of functions on which it is unsafe to interrupt a
 * thread (malloc, free, ...). The file is mapped read-only; nothing is written.
 */
#ifndef PROBING_ELFSYM_H
#define PROBING_ELFSYM_H

#include <stdbool.h>
#include <stdint.h>

struct elfsym;

/*
 * Map @path (or the already open @fd, which stays the caller's) and index its dynamic symbol
 * table. Return the object (caller frees with elfsym__free) or NULL with errno: ENOEXEC (not
 * an x86-64 ELF64 file, or malformed), or what open/mmap said.
 */
struct elfsym *elfsym__open(const char *path);
struct elfsym *elfsym__open_fd(int fd);
/* Unmap and free. NULL is a no-op. */
void elfsym__free(struct elfsym *e);

/*
 * Find the defined function or object @name. @version NULL picks what an unversioned
 * reference binds to: the default version ("name@@V", or an unversioned definition);
 * otherwise exactly "name@version" (hidden/compat versions included, e.g. dlopen@GLIBC_2.2.5).
 * Return 0 and the symbol's st_value in *@value and st_size in *@size (either may be NULL),
 * or -ENOENT.
 */
int elfsym__lookup(const struct elfsym *e, const char *name, const char *version, uint64_t *value,
		   uint64_t *size);

/*
 * The load bias of this file when its segment with file offset @map_offset (page aligned, as
 * in /proc/PID/maps) is mapped at @map_start: runtime address = st_value + bias.
 * Return 0 or -ENOENT (no PT_LOAD covers that offset).
 */
int elfsym__bias(const struct elfsym *e, uint64_t map_start, uint64_t map_offset, uint64_t *bias);

/* true for ET_DYN (shared objects, PIE), false for ET_EXEC. */
bool elfsym__is_dyn(const struct elfsym *e);

/* The DT_SONAME, or NULL. Valid while @e lives. */
const char *elfsym__soname(const struct elfsym *e);

#endif
