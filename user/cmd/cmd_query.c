// SPDX-License-Identifier: MIT
/*
 * probing query: SQL on a recording or on the live tables of a process. Two separate halves:
 * open_source() gives a sqlite3 connection (recording.c for a file, livedb.c for a live
 * process), sqlout__run() (sqlout.h) runs SQL on any connection and prints it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "live/backtrace.h"
#include "base/cli.h"
#include "live/live.h"
#include "live/jobsql.h"
#include "live/livedb.h"
#include "live/livejob.h"
#include "live/tasks.h"
#include "base/log.h"
#include "report/recording.h"
#include "report/recwindow.h"
#include "report/sqlout.h"
#include "report/torchtrace.h"
#include "base/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing query [-i FILE|DIR] [--last DURATION] [--format "
		"table|csv|json|json-compact] "
		"[--no-header] "
		"SQL\n"
		"       probing query -p PID|-t PID|-t HOST:PORT [OPTIONS] SQL\n"
		"       probing query -p PID --save FILE [SQL]\n"
		"       probing query -p PID[,PID...] [--children] [OPTIONS] SQL\n"
		"\n"
		"Run SQL (SQLite's dialect) on a recording, or on the live tables of a running\n"
		"process, and print the result. A recording's public views are samples, frames "
		"and\n"
		"sample_times; meta, processes and threads describe it (docs/sql.md documents "
		"every\n"
		"table and column). A live process has system.process and system.threads (from\n"
		"/proc), python.backtrace (every thread's Python stack, read from outside when "
		"the\n"
		"agent is not loaded) and, with the agent (probing inject), every python.* table "
		"it\n"
		"serves (docs/live.md). Several statements separated by ';' run in order and each\n"
		"prints its result. The recording is opened read-only: keep intermediate results "
		"in\n"
		"TEMP tables or views; ATTACH and VACUUM INTO, which reach other files, are\n"
		"refused, on live tables too (--save is the one way to write a file). SQL may\n"
		"start with a '-- comment' line.\n"
		"\n"
		"A job: with several PIDs, or --children (each PID and all its descendants now,\n"
		"e.g. torchrun's pid), the SQL runs on every process's live tables and the rows\n"
		"come back as one result, with the process's rank (from its environment: "
		"torchrun,\n"
		"Slurm, Open MPI, PMI; NULL for a launcher) and pid in front. A process that\n"
		"cannot answer (no agent for a python.* table, gone) is reported on stderr and\n"
		"left out; the exit status is 1 only when no process answered.\n"
		"A backtrace snapshot (probing backtrace -o FILE) is read with -i FILE too: its\n"
		"tables are bt_processes, bt_threads, bt_frames and the views bt_stacks, "
		"bt_groups.\n"
		"\n"
		"Options:\n"
		"  -i, --input FILE      the recording to read (default: probing.db), or the\n"
		"                        directory of a 'probing watch -o DIR': what it keeps,\n"
		"                        as one recording (a private copy: what the SQL changes\n"
		"                        is dropped at the end)\n"
		"      --last DURATION   -i: only the last DURATION of the recording (90s, 5m,\n"
		"                        2h), back from its latest second sampled\n"
		"  -p, --pid PID         query the live tables of process PID instead\n"
		"                        (PID,PID...: of several)\n"
		"      --children        with -p: also every descendant of each PID\n"
		"  -t, --target T        the same for a PID, or HOST:PORT of an agent serving TCP\n"
		"                        (token in $PROBING_TOKEN)\n"
		"      --timeout SEC     live: how long to wait for the target's GIL (default 5);\n"
		"                        -i: stop the SQL if it runs longer than SEC (default: no\n"
		"                        limit)\n"
		"      --save FILE       (live) first copy python.torch_trace, the PyTorch hooks'\n"
		"                        table, into the recording FILE (created if missing), "
		"where\n"
		"                        'query -i FILE' and 'export -i FILE --format chrome' "
		"read\n"
		"                        it later; the SQL is then optional\n"
		"  -f, --format FORMAT   table: aligned columns for reading (the default, on a\n"
		"                        terminal or not); csv: RFC 4180 with a header row;\n"
		"                        json: an array of objects per statement, one per row;\n"
		"                        json-compact: per statement {\"columns\": [...],\n"
		"                        \"rows\": [[...], ...]}, a row per line\n"
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
		"      GROUP BY f.func ORDER BY n DESC LIMIT 10\"\n"
		"  # what a watch kept of the last 10 minutes: the busiest threads\n"
		"  probing query -i /var/tmp/watch --last 10m \"SELECT thread, SUM(count) AS n\n"
		"      FROM samples GROUP BY thread ORDER BY n DESC LIMIT 5\"\n"
		"  # live: where is every thread of process 1234 right now?\n"
		"  probing query -p 1234 \"SELECT * FROM python.backtrace ORDER BY tid, depth\"\n"
		"  probing query -p 1234 \"SELECT tid, name, state, utime FROM system.threads\"\n"
		"  # every rank of a job: where is each main thread?\n"
		"  probing query -p $(pgrep -f torchrun) --children \"SELECT func, file, lineno\n"
		"      FROM python.backtrace WHERE thread = 'MainThread' AND depth = 0\"\n"
		"  # PyTorch hooks (probing inject -p 1234 --torch): the slowest modules lately\n"
		"  probing query -p 1234 \"SELECT module, stage, AVG(duration) FROM "
		"python.torch_trace\n"
		"      WHERE step > (SELECT MAX(step) - 20 FROM python.torch_trace)\n"
		"      GROUP BY module, stage ORDER BY 3 DESC LIMIT 10\"\n"
		"  probing query -p 1234 --save steps.db && probing query -i steps.db \\\n"
		"      \"SELECT step, SUM(duration) FROM python.torch_trace WHERE depth = 0 GROUP "
		"BY "
		"step\"\n");
}

/* What to run the SQL on. */
struct source {
	const char *input;   /* a recording */
	const char *pid_arg; /* -p */
	const char *t_arg;   /* -t */
	int gil_ms;
	bool children; /* --children */
	double last_s; /* --last: of the recording; 0: all of it */
};

/* Several processes (-p PID,PID... or --children): one result with their rank and pid. */
static bool is_job(const struct source *src)
{
	return src->children || (src->pid_arg && strchr(src->pid_arg, ','));
}

/* The SQL on every process of the job: the results put together, then printed. */
static int query_job(const struct source *src, const char *sql, const struct sqlout_options *o)
{
	struct jobsql_result r = {0};
	struct job_procs j = {0};
	struct strbuf all = {0};
	int i, rc;

	rc = livejob__resolve_arg("query", src->pid_arg, src->children, &j);
	if (rc)
		return rc;
	livejob__note_unreadable("query", &j);
	/* Without the agent, python.backtrace is read from outside. */
	livedb__set_outside_backtrace(backtrace__json_rows);
	if (jobsql__run("query", &j, sql, src->gil_ms, &r)) {
		livejob__free(&j);
		return EXIT_FAIL;
	}
	for (i = 0; i < r.n; i++)
		sb_printf(&all, "%s%s", i ? ";\n" : "", r.select[i]);
	rc = r.unanswered ? EXIT_FAIL : EXIT_OK;
	if (r.n && sqlout__run(r.db, sb_str(&all), o, stdout))
		rc = EXIT_FAIL;
	sb_free(&all);
	jobsql__free(&r);
	livejob__free(&j);
	return rc;
}

static bool is_live(const struct source *src)
{
	return src->pid_arg || src->t_arg;
}

/* Open @src into *@db; return 0, or an exit status with the reason printed. */
static int open_source(const struct source *src, sqlite3 **db)
{
	struct live_target t;
	int rc;

	if (!is_live(src)) {
		if (recwindow__open(src->input, RECORDING_SAMPLES | RECORDING_BACKTRACE,
				    src->last_s, db, NULL))
			return EXIT_FAIL;
		torchtrace__alias(*db, src->input); /* torch_trace also as python.torch_trace */
		return 0;
	}
	rc = live__target("query", src->pid_arg, src->t_arg, &t);
	if (rc)
		return rc;
	/* Without the agent, python.backtrace is read from outside. */
	livedb__set_outside_backtrace(backtrace__json_rows);
	livedb__set_outside_table("tasks", tasks__json_rows);
	return livedb__open_target(&t, src->gil_ms, db) ? EXIT_FAIL : 0;
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

/*
 * Is @arg, which getopt took for an unknown long option, SQL that starts with a comment
 * ("-- the busiest threads\nSELECT ...")? Option names hold no white space: a "--" followed
 * by white space before any '=' is no option.
 */
static bool sql_comment_arg(const char *arg)
{
	size_t space;

	if (strncmp(arg, "--", 2))
		return false;
	space = strcspn(arg + 2, " \t\r\n");
	return arg[2 + space] && space < strcspn(arg + 2, "=");
}

enum {
	OPT_NO_HEADER = 256,
	OPT_TIMEOUT,
	OPT_SAVE,
	OPT_CHILDREN,
	OPT_LAST,
};

static const struct option options[] = {
	{"input", required_argument, NULL, 'i'},
	{"pid", required_argument, NULL, 'p'},
	{"target", required_argument, NULL, 't'},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{"format", required_argument, NULL, 'f'},
	{"no-header", no_argument, NULL, OPT_NO_HEADER},
	{"save", required_argument, NULL, OPT_SAVE},
	{"children", no_argument, NULL, OPT_CHILDREN},
	{"last", required_argument, NULL, OPT_LAST},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

int cmd_query(int argc, char **argv)
{
	struct source src = {.input = "probing.db", .gil_ms = LIVE_GIL_TIMEOUT_MS};
	bool input_given = false, timeout_given = false;
	const char *save = NULL, *sql_arg = NULL;
	struct sqlout_options o = {.format = SQLOUT_TABLE};
	char *sql = NULL;
	sqlite3 *db = NULL;
	int c, ret = EXIT_FAIL;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, ":i:f:p:t:h", options, NULL)) != -1) {
		switch (c) {
		case 'i':
			src.input = optarg;
			input_given = true;
			break;
		case 'p':
			src.pid_arg = optarg;
			break;
		case 't':
			src.t_arg = optarg;
			break;
		case OPT_SAVE:
			save = optarg;
			break;
		case OPT_CHILDREN:
			src.children = true;
			break;
		case OPT_LAST:
			if (cli_parse_last("query", optarg, &src.last_s))
				return EXIT_USAGE;
			break;
		case OPT_TIMEOUT:
			c = live__parse_timeout("query", optarg, &src.gil_ms);
			if (c)
				return c;
			timeout_given = true;
			break;
		case 'f':
			if (sqlout__parse_format(optarg, &o.format))
				return cli_usage_error("query",
						       "unknown --format '%s': use table, csv, "
						       "json or json-compact",
						       optarg);
			break;
		case OPT_NO_HEADER:
			o.no_header = true;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			if (c == '?' && !optopt && optind > 0 &&
			    sql_comment_arg(argv[optind - 1]) && !sql_arg) {
				sql_arg = argv[optind - 1];
				break;
			}
			return cli_bad_option("query", c, argv);
		}
	}
	if (input_given && is_live(&src))
		return cli_usage_error("query", "give either -i FILE or a live target (-p/-t), "
						"not both");
	if (src.last_s > 0 && is_live(&src))
		return cli_usage_error("query", "--last reads part of a recording: it goes with -i "
						"FILE or -i DIR, not with a live target");
	if (save && !is_live(&src))
		return cli_usage_error("query",
				       "--save copies a live process's table: give -p PID");
	if (save && !*save)
		return cli_usage_error("query", "--save needs a file name");
	if (src.children && !src.pid_arg)
		return cli_usage_error("query", "--children goes with -p PID (a process id, not "
						"-t HOST:PORT or -i FILE)");
	if (is_job(&src) && (src.t_arg || save))
		return cli_usage_error("query", "several processes (--children, or PID,PID...) go "
						"with -p only, without -t and --save");
	if (sql_arg && optind < argc)
		return cli_usage_error("query",
				       "give the SQL as one argument (quote it): got '%s' and '%s'",
				       sql_arg, argv[optind]);
	if (sql_arg)
		sql = strdup(sql_arg);
	else if (optind >= argc && save)
		sql = strdup("");
	else if (optind >= argc)
		return cli_usage_error("query", "no SQL given");
	else if (argc - optind > 1)
		return cli_usage_error("query",
				       "give the SQL as one argument (quote it): got %d arguments "
				       "starting with '%s'",
				       argc - optind, argv[optind]);
	else
		sql = !strcmp(argv[optind], "-") ? read_stdin() : strdup(argv[optind]);
	/* On a recording, --timeout bounds the SQL (a live target's bounds the GIL wait). */
	if (timeout_given && !is_live(&src))
		o.time_limit_ms = src.gil_ms;
	if (!sql)
		goto cleanup;
	if (blank(sql) && !save) {
		ret = cli_usage_error("query", "the SQL is empty");
		goto cleanup;
	}
	if (is_job(&src)) {
		ret = query_job(&src, sql, &o);
		goto cleanup;
	}
	c = open_source(&src, &db);
	if (c) {
		ret = c;
		goto cleanup;
	}
	if (save) {
		long long added, total;

		if (torchtrace__save(db, save, &added, &total))
			goto cleanup;
		log_cmd("query", "saved %lld new rows of python.torch_trace into %s (%lld in all)",
			added, save, total);
		if (blank(sql)) {
			ret = EXIT_OK;
			goto cleanup;
		}
	}
	if (!sqlout__run(db, sql, &o, stdout))
		ret = EXIT_OK;
cleanup:
	if (is_live(&src))
		sqlite3_close(db);
	else
		recording__close(db);
	free(sql);
	return ret;
}

COMMAND(query, cmd_query, "run SQL on a recording or on a live process's tables", 30);
