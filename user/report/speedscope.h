/* SPDX-License-Identifier: MIT */
/*
 * speedscope: a loaded recording as a speedscope JSON file (https://www.speedscope.app,
 * file format src/lib/file-format-spec.ts of github.com/jlfwong/speedscope).
 *
 * One "sampled" profile per thread, named "NAME (pid P, tid T)", the busiest thread shown
 * first; samples are stacks of indices into shared.frames, root first, with weights in
 * samples (unit "none"). Loaded with PROFILE_BY_TIME, the samples follow the recording's
 * seconds, so speedscope's "Time Order" view shows the run from left to right at a
 * resolution of one second (within a second, stacks are in id order).
 */
#ifndef PROBING_SPEEDSCOPE_H
#define PROBING_SPEEDSCOPE_H

#include <stdio.h>

#include "report/profile.h"

/* Write @p as a speedscope file named @name to @f. Return 0, -ENOMEM or -EIO. */
int speedscope__write(const struct profile *p, const char *name, FILE *f);

#endif
