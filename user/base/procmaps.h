/* SPDX-License-Identifier: MIT */
/*
 * procmaps: a snapshot of /proc/PID/maps, and opening the exact file behind a mapping from
 * outside the process (its mount namespace may differ from ours, the file may have been
 * replaced or deleted since it was mapped).
 */
#ifndef PROBING_PROCMAPS_H
#define PROBING_PROCMAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct procmap {
	uint64_t start, end; /* [start, end) */
	uint64_t offset;     /* file offset of start */
	uint64_t inode;
	unsigned int dev_major, dev_minor;
	bool r, w, x, p;  /* permissions; p = private */
	const char *path; /* file path, "[vdso]", "[heap]"..., or "" (anonymous) */
	bool deleted;	  /* the path ended with " (deleted)" (stripped from path) */
};

struct procmaps {
	struct procmap *maps; /* sorted by start, as the kernel lists them */
	size_t nr;
	char *text; /* owns the path strings */
};

/* Parse the text of a maps file (NUL-terminated). Return 0 or -errno (-EINVAL: bad line). */
int procmaps__parse(const char *text, struct procmaps *out);

/* Read and parse /proc/@pid/maps. 0, -ESRCH (no such process) or -errno. */
int procmaps__read(pid_t pid, struct procmaps *out);

/* The number of mappings of @pid now (a cheap "did it load something" signal); 0 if gone. */
size_t procmaps__count(pid_t pid);

/* Release what parse/read allocated; the struct may be reused. */
void procmaps__release(struct procmaps *pm);

/* The mapping containing @addr, or NULL. */
const struct procmap *procmaps__find(const struct procmaps *pm, uint64_t addr);

/* The basename of a mapping's path ("" for anonymous mappings). */
const char *procmaps__basename(const struct procmap *m);

/*
 * Open (O_RDONLY) the file mapped by @m in @pid: through /proc/PID/root (the target's view of
 * the filesystem) when the device and inode there match the mapping, else through
 * /proc/PID/map_files (exact, even for deleted files; needs CAP_SYS_ADMIN), else the
 * /proc/PID/root file if its bytes at the mapping's offset are the ones mapped (overlayfs
 * reports other inodes). Return an fd or -errno (-ESTALE: replaced since it was mapped).
 */
int procmaps__open(pid_t pid, const struct procmap *m);

#endif
