/* SPDX-License-Identifier: MIT */
/*
 * pyelf: the ELF file behind a mapping of another process, for symbol lookups (the CPython
 * interpreter's _PyRuntime, Py_Version, PyCode_Type, _PyEval_EvalFrameDefault...).
 *
 * Files are opened with procmaps__open(): through /proc/PID/root/PATH, so a target in
 * another mount namespace (a container) is served by its own files, checked against the
 * mapping's device and inode, else /proc/PID/map_files/START-END.
 */
#ifndef PROBING_PYELF_H
#define PROBING_PYELF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct pyelf;

struct procmap;

/* Open the file of @map in process @pid (procmaps__open). NULL with errno set on failure. */
struct pyelf *pyelf__open(pid_t pid, const struct procmap *map);

/* Open a file by path in our own namespace (tools, tests). NULL with errno set. */
struct pyelf *pyelf__open_path(const char *path);

/* Close. NULL is a no-op. */
void pyelf__free(struct pyelf *e);

/*
 * Look up defined symbols @names[0..@n) in .dynsym and, if @symtab, also in .symtab (slower:
 * tens of thousands of entries). For each found name values[i] gets its st_value (an address
 * in the file's own layout: add the load bias) and sizes[i] (may be NULL) its st_size;
 * missing names get values[i] = 0. Return how many were found, or -errno.
 */
int pyelf__symbols(struct pyelf *e, const char *const *names, int n, bool symtab, uint64_t *values,
		   uint64_t *sizes);

/* Whether the file has a .symtab (is not stripped). */
bool pyelf__has_symtab(struct pyelf *e);

/*
 * The load bias (runtime address - file address) given that file offset @offset is mapped at
 * @start. Return 0 or -ENOENT (no PT_LOAD covers @offset).
 */
int pyelf__bias(struct pyelf *e, uint64_t start, uint64_t offset, uint64_t *bias);

/*
 * The offset in the file of the file address @addr (what a uprobe is attached at). Return 0
 * and *@offset, or -ENOENT (no PT_LOAD holds @addr in the file).
 */
int pyelf__file_offset(struct pyelf *e, uint64_t addr, uint64_t *offset);

/* Read @len bytes of the file at file address @addr (from a PROGBITS section). 0 or -errno. */
int pyelf__read(struct pyelf *e, uint64_t addr, void *buf, size_t len);

/*
 * The file address and size of the allocated section named @name (".AsyncioDebug"). Return 0
 * or -ENOENT (none), -EINVAL (no section names).
 */
int pyelf__section(struct pyelf *e, const char *name, uint64_t *addr, uint64_t *size);

/* The GNU build ID as lowercase hex into @buf (>= 41 bytes). 0 or -ENOENT. */
int pyelf__build_id(struct pyelf *e, char *buf, size_t size);

/*
 * The compiler-split out-of-line part (GCC's "function.cold") of the function at file address
 * @start (@size bytes), in a file without .symtab to name it: the .eh_frame FDE that direct
 * jumps (jmp/jcc rel32) leaving the function land inside of, at many different addresses (a
 * tail call lands on a function's first byte; jumps into the cold part land all over it).
 * Return 0 with [*@cstart, *@cend) or -ENOENT.
 */
int pyelf__cold_part(struct pyelf *e, uint64_t start, uint64_t size, uint64_t *cstart,
		     uint64_t *cend);

#endif
