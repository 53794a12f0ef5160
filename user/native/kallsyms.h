/* SPDX-License-Identifier: MIT */
/* kallsyms: kernel addresses to function names, from /proc/kallsyms. */
#ifndef PROBING_KALLSYMS_H
#define PROBING_KALLSYMS_H

#include <stdint.h>

#include "base/frame.h"

struct kallsyms;

/* Load /proc/kallsyms (needs root to see addresses). NULL with errno set on failure. */
struct kallsyms *kallsyms__load(void);
/* Parse kallsyms-format @text (for tests). */
struct kallsyms *kallsyms__parse(const char *text);
void kallsyms__free(struct kallsyms *ks);

/*
 * The frame for kernel address @addr: the function containing it (the nearest symbol at or
 * below @addr), its module ("[kernel]" or "[mod]"). The frame's strings live as long as @ks.
 */
struct frame kallsyms__frame(const struct kallsyms *ks, uint64_t addr);

#endif
