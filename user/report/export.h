/* SPDX-License-Identifier: MIT */
/*
 * export: the formats 'probing export' writes, one table of {name, help, writer}. The command
 * (user/cmd/cmd_export.c) finds a format here by name, lists them in its --help and errors, and
 * calls the writer; it knows no format itself. Adding one: its writer in user/report/, a row in
 * export.c, and its description in docs/export.md.
 */
#ifndef PROBING_EXPORT_H
#define PROBING_EXPORT_H

#include <stdbool.h>
#include <stdio.h>
#include <sqlite3.h>

#include "report/profile.h"

struct export_format {
	const char *name; /* --format NAME */
	/* What it is, for --help: lines of about 66 characters, each ending in '\n'. */
	const char *help;
	/*
	 * A format of the samples of a recording: @p loaded with @load_flags (profile.h) from
	 * the recording @input, written to @f. Return 0, or -errno (errno may tell more).
	 */
	int (*write_samples)(const struct profile *p, const char *input, FILE *f);
	unsigned int load_flags;
	bool binary; /* not text: refused on a terminal */
	/*
	 * Or a format of the PyTorch hooks' timeline (torchtrace.h): @table (python.torch_trace
	 * of a live process, or torch_trace of a recording) of @db to @f; *@events = events
	 * written. Return 0, -ENOENT (no rows: nothing written), -EINVAL (an SQL error, printed),
	 * or -errno.
	 */
	int (*write_trace)(sqlite3 *db, const char *table, FILE *f, long long *events);
};

/* Every format, in the order --help lists them; the last one's name is NULL. */
extern const struct export_format export_formats[];

/* The format called @name, or NULL. */
const struct export_format *export_format__find(const char *name);

#endif
