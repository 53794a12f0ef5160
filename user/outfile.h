/* SPDX-License-Identifier: MIT */
/*
 * outfile: write a command's output file all or nothing. Data goes to a temporary file in the
 * destination's directory, which replaces the destination only once everything was written
 * (rename(2) is atomic), so a failure — a full disk, an error half-way — never leaves a
 * truncated SVG or profile behind, and an existing file stays intact until then. "-" means
 * stdout.
 */
#ifndef PROBING_OUTFILE_H
#define PROBING_OUTFILE_H

#include <stdio.h>

struct outfile;

/*
 * Start writing @path ("-" = stdout). Return 0 and *@out, or -errno with a message
 * saying what failed and why already printed (e.g. the directory does not exist).
 */
int outfile__open(const char *path, struct outfile **out);

/* The stream to write to; valid until commit or abort. */
FILE *outfile__fp(struct outfile *of);

/*
 * Finish: flush, and move the temporary file over the destination (its permissions follow
 * the umask, like a file created by open(2)). Frees @of. Return 0 or -errno with the
 * reason printed; on failure the temporary file is removed.
 */
int outfile__commit(struct outfile *of);

/* Give up: remove the temporary file. Frees @of; NULL is a no-op. */
void outfile__abort(struct outfile *of);

#endif
