/* SPDX-License-Identifier: MIT */
/*
 * pprof: a loaded recording as a pprof profile (github.com/google/pprof, proto/profile.proto),
 * the format 'go tool pprof', Pyroscope, Parca and speedscope read.
 *
 *   sample types    samples/count and cpu/nanoseconds (count x the sampling period,
 *                   1e9 / meta 'frequency'); period_type cpu/nanoseconds. A wall-clock
 *                   profile (profile.wall: record --off-cpu) has wall/nanoseconds instead
 *                   (samples.ns), a label state, and each off-CPU stack's state pseudo-frame
 *                   as its leaf
 *   samples         one per (pid, tid, stack), locations leaf first, labels pid and tid
 *                   (numbers) and thread (its name)
 *   locations       one per frame of the recording, one line each (function, line)
 *   functions       one per (name, file), Python ones named by their qualname; no
 *                   system names (frames are demangled already, and pprof would
 *                   "simplify" a name equal to its system name like a C++ symbol)
 *   mappings        one per native/kernel module (file name only: there are no addresses),
 *                   the executables of the recorded processes first (the busiest one's
 *                   first of all): pprof names the first mapping as the profile's file
 */
#ifndef PROBING_PPROF_H
#define PROBING_PPROF_H

#include <stdio.h>

#include "report/profile.h"
#include "base/util.h"

/*
 * Encode @p as an uncompressed Profile message into @out. @frequency is the sampling rate
 * in Hz the cpu values are computed with (> 0). Return 0 or -ENOMEM.
 */
int pprof__encode(const struct profile *p, double frequency, struct strbuf *out);

/* Write @n bytes of @data gzip-compressed to @f (pprof files are gzipped). 0 or -errno. */
int pprof__gzip(FILE *f, const void *data, size_t n);

#endif
