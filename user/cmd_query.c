// SPDX-License-Identifier: MIT
/*
 * probing query: SQL on a recording. Two separate halves: open_source() gives a sqlite3
 * connection, sqlout__run() (sqlout.h) runs SQL on any connection and prints it. Another
 * source of tables — a live process's agent — is one more case in open_source().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "log.h"
#include "recording.h"
#include "sqlout.h"
#include "util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing query [-i FILE] [--format table|csv|json] [--no-header] SQL\n"
		"\n"
		"Run SQL (SQLite's dialect) on a recording and print the result. The public views\n"
		"are samples, frames and sample_times; meta, processes and threads describe the\n"
		"recording (docs/sql.md documents every table and column). Several statements\n"
		"separated by ';' run in order and each prints its result. The recording is\n"
		"opened read-only: keep intermediate results in TEMP tables or views.\n"
		"\n"
		"Options:\n"
		"  -i, --input FILE      the recording to read (default: probing.db)\n"
		"  -f, --format FORMAT   table: aligned columns for reading (the default, on a\n"
		"                        terminal or not); csv: RFC 4180 with a header row;\n"
		"                        json: an array of objects per statement, one per row\n"
		"      --no-header       leave out the column names (table, csv)\n"
		"  -h, --help            show this help\n"
		"SQL '-' reads the statements from stdin.\n"
		"\n"
		"Examples:\n"
		"  probing query -i app.db \"SELECT thread, SUM(count) AS n FROM samples\n"
		"                           GROUP BY thread ORDER BY n DESC\"\n"
		"  probing query -i app.db -f csv \"SELECT * FROM frames WHERE kind = 'python'\" "
		">f.csv\n"
		"  # the functions most often running (leaf frames), with their share of samples:\n"
		"  probing query -i app.db \"SELECT f.func, SUM(s.count) AS n,\n"
		"      round(100.0 * SUM(s.count) / (SELECT SUM(count) FROM samples), 1) AS pct\n"
		"      FROM samples s JOIN frames f ON f.stack_id = s.stack_id AND f.depth = 0\n"
		"      GROUP BY f.func ORDER BY n DESC LIMIT 10\"\n");
}

/* What to run the SQL on. */
struct source {
	const char *input; /* a recording */
};

/* Open @src into *@db; return 0, or non-zero with the reason printed. */
static int open_source(const struct source *src, sqlite3 **db)
{
	return recording__open(src->input, db);
}

/* Read all of stdin into a malloc'd string, or NULL with the reason printed. */
static char *read_stdin(void)
{
	struct strbuf sb = {0};
	char buf[65536];
	ssize_t n;

	for (;;) {
		n = read(STDIN_FILENO, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			pr_warn("cannot read the SQL from stdin: %s", strerror(errno));
			sb_free(&sb);
			return NULL;
		}
		if (!n)
			break;
		if (sb_append(&sb, buf, n)) {
			pr_warn("out of memory reading the SQL");
			sb_free(&sb);
			return NULL;
		}
	}
	if (!sb.buf)
		return strdup("");
	return sb.buf;
}

static bool blank(const char *s)
{
	return strspn(s, " \t\r\n") == strlen(s);
}

enum {
	OPT_NO_HEADER = 256,
};

static const struct option options[] = {
	{"input", required_argument, NULL, 'i'},
	{"format", required_argument, NULL, 'f'},
	{"no-header", no_argument, NULL, OPT_NO_HEADER},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

int cmd_query(int argc, char **argv)
{
	struct source src = {.input = "probing.db"};
	struct sqlout_options o = {.format = SQLOUT_TABLE};
	char *sql = NULL;
	sqlite3 *db = NULL;
	int c, ret = EXIT_FAIL;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, ":i:f:h", options, NULL)) != -1) {
		switch (c) {
		case 'i':
			src.input = optarg;
			break;
		case 'f':
			if (sqlout__parse_format(optarg, &o.format))
				return cli_usage_error(
					"query", "unknown --format '%s': use table, csv or json",
					optarg);
			break;
		case OPT_NO_HEADER:
			o.no_header = true;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return cli_bad_option("query", c, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error("query", "no SQL given");
	if (argc - optind > 1)
		return cli_usage_error("query",
				       "give the SQL as one argument (quote it): got %d arguments "
				       "starting with '%s'",
				       argc - optind, argv[optind]);
	sql = !strcmp(argv[optind], "-") ? read_stdin() : strdup(argv[optind]);
	if (!sql)
		goto cleanup;
	if (blank(sql)) {
		ret = cli_usage_error("query", "the SQL is empty");
		goto cleanup;
	}
	if (open_source(&src, &db))
		goto cleanup;
	if (!sqlout__run(db, sql, &o, stdout))
		ret = EXIT_OK;
cleanup:
	recording__close(db);
	free(sql);
	return ret;
}

COMMAND(query, cmd_query, "run SQL on a recording (table, CSV or JSON output)", 30);
