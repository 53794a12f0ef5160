/* SPDX-License-Identifier: MIT */
/*
 * procmaps: /proc/PID/maps as an array, and opening the exact file behind a mapping from
 * outside the process (its mount namespace may differ from ours, the file may have been
 * replaced or deleted since it was mapped).
 */
#ifndef PROBING_PROCMAPS_H
#define PROBING_PROCMAPS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct mapping {
	uint64_t start, end, offset;
	uint64_t dev; /* makedev(major, minor) as printed in maps */
	uint64_t ino;
	char perms[5]; /* "r-xp" */
	bool deleted;  /* the path ended in " (deleted)" (removed from the path below) */
	char *path;    /* "/usr/lib/..." , "[stack]", "[vdso]", or "" for anonymous */
};

struct procmaps {
	struct mapping *m;
	int nr;
};

/* Read /proc/@pid/maps. Return 0 or -errno (-ESRCH if the process is gone). */
int procmaps__read(pid_t pid, struct procmaps *out);
/* Free what procmaps__read allocated (the struct itself is the caller's). */
void procmaps__free(struct procmaps *pm);

/* The mapping containing @addr, or NULL. */
const struct mapping *procmaps__find(const struct procmaps *pm, uint64_t addr);

/* The basename of a mapping's path ("" for anonymous mappings). */
const char *procmaps__basename(const struct mapping *m);

/*
 * Open (O_RDONLY) the file mapped by @m in @pid: through /proc/PID/root (the target's view of
 * the filesystem) when the inode there still matches the mapping, else through
 * /proc/PID/map_files (exact, even for deleted files; root only). Return an fd or -errno.
 */
int procmaps__open(pid_t pid, const struct mapping *m);

#endif
