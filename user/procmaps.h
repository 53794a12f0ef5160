/* SPDX-License-Identifier: MIT */
/* procmaps: a snapshot of /proc/PID/maps. */
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

/* Release what parse/read allocated; the struct may be reused. */
void procmaps__release(struct procmaps *pm);

/* The mapping containing @addr, or NULL. */
const struct procmap *procmaps__find(const struct procmaps *pm, uint64_t addr);

#endif
