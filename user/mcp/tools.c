// SPDX-License-Identifier: MIT
/* tools: the MCP tools of `probing mcp`, each one a command of this binary run as a child. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/escape.h"
#include "base/util.h"
#include "base/jobinfo.h"
#include "base/jsonq.h"
#include "base/subcmd.h"
#include "live/live.h"
#include "live/pyscan.h"
#include "mcp/tools.h"

#define MAX_TEXT     (256u << 10) /* what a tool returns at most: an assistant's context is small */
#define MAX_PROCS    32		  /* backtraces of one call */
#define LIST_MS	     30000
#define BACKTRACE_MS 30000

static struct tools_opts opts;
static pthread_mutex_t recdir_lock = PTHREAD_MUTEX_INITIALIZER; /* recdir, nrecordings */
static char recdir[64]; /* where record_and_summarize writes, made on first use */
static int nrecordings;
static __thread struct tool_call *current; /* the call this thread runs (tools__call) */

void tools__init(const struct tools_opts *o)
{
	opts = *o;
}

/* ---- arguments ------------------------------------------------------------------------------ */

/*
 * Integer argument @key of @args into *@out, in [lo, hi]; @def when absent (if @required,
 * absence is an error). 0, or -EINVAL with the reason in @text.
 */
static int arg_int(const char *args, const char *key, bool required, long lo, long hi, long def,
		   long *out, struct strbuf *text)
{
	char path[64];
	const char *type;
	long long v;

	snprintf(path, sizeof(path), "$.%s", key);
	type = jq_type(args, path);
	if (!type || !strcmp(type, "null")) {
		if (required) {
			sb_printf(text, "missing argument '%s'", key);
			return -EINVAL;
		}
		*out = def;
		return 0;
	}
	if (strcmp(type, "integer") || jq_int(args, path, &v) || v < lo || v > hi) {
		sb_printf(text, "argument '%s' must be an integer from %ld to %ld", key, lo, hi);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int arg_bool(const char *args, const char *key, bool def, bool *out, struct strbuf *text)
{
	char path[64];
	const char *type;

	snprintf(path, sizeof(path), "$.%s", key);
	type = jq_type(args, path);
	if (!type || !strcmp(type, "null")) {
		*out = def;
		return 0;
	}
	if (strcmp(type, "true") && strcmp(type, "false")) {
		sb_printf(text, "argument '%s' must be true or false", key);
		return -EINVAL;
	}
	*out = !strcmp(type, "true");
	return 0;
}

/* A string argument, malloc'd into *@out (NULL when absent and not @required). */
static int arg_text(const char *args, const char *key, bool required, char **out,
		    struct strbuf *text)
{
	char path[64];
	const char *type;

	snprintf(path, sizeof(path), "$.%s", key);
	type = jq_type(args, path);
	*out = NULL;
	if (!type || !strcmp(type, "null")) {
		if (!required)
			return 0;
		sb_printf(text, "missing argument '%s'", key);
		return -EINVAL;
	}
	if (strcmp(type, "text")) {
		sb_printf(text, "argument '%s' must be a string", key);
		return -EINVAL;
	}
	*out = jq_text(args, path);
	if (!*out) {
		sb_puts(text, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* ---- running commands ----------------------------------------------------------------------- */

static void track(pid_t pid, void *ctx)
{
	struct tool_call *call = ctx;

	call->pid = pid;
	/* Cancelled between the check in run() and now: nobody else will stop it. */
	if (pid > 0 && call->cancelled)
		subcmd__stop(pid);
}

void tools__cancel(struct tool_call *call)
{
	pid_t pid = call->pid;

	call->cancelled = 1;
	if (pid > 0)
		subcmd__stop(pid);
}

/*
 * Run `probing ARGV` with @input on stdin; 0 or -errno (could not start, or the call was
 * cancelled: said in @text).
 */
static int run(const char *const *argv, const char *input, int timeout_ms, struct subcmd_result *r,
	       struct strbuf *text)
{
	struct subcmd_opts o = {.input = input,
				.input_len = input ? strlen(input) : 0,
				.max_out = MAX_TEXT,
				.timeout_ms = timeout_ms,
				.watch_fd = -1,
				.on_pid = track,
				.ctx = current};
	int err;

	if (current->cancelled) {
		memset(r, 0, sizeof(*r));
		sb_puts(text, "cancelled");
		return -ECANCELED;
	}
	err = subcmd__run(argv, &o, r);
	if (err)
		sb_printf(text, "cannot run probing %s: %s", argv[0], strerror(-err));
	return err;
}

/* Append what the command printed, and why it stopped if it was stopped. */
static void append_output(struct strbuf *text, const struct subcmd_result *r, bool with_err)
{
	sb_append(text, sb_str(&r->out), r->out.len);
	if (r->truncated)
		sb_printf(text, "\n(output cut at %u KiB)\n", MAX_TEXT >> 10);
	if (with_err && r->err.len) {
		if (text->len && text->buf[text->len - 1] != '\n')
			sb_puts(text, "\n");
		sb_append(text, r->err.buf, r->err.len);
	}
	if (r->timed_out)
		sb_puts(text, "\n(stopped: it took too long)\n");
	else if (r->status > 128 && !r->truncated)
		sb_printf(text, "\n(the command was killed by signal %d, %s)\n", r->status - 128,
			  strsignal(r->status - 128));
}

/* ---- list_processes ------------------------------------------------------------------------- */

static int tool_list(const char *args, struct strbuf *text, bool *is_error)
{
	static const char *const argv[] = {"list", "--all", "--format", "json", NULL};
	struct subcmd_result r;

	if (run(argv, NULL, LIST_MS, &r, text))
		return -EIO;
	*is_error = r.status != 0;
	append_output(text, &r, r.status != 0);
	subcmd__result_free(&r);
	return 0;
}

/* ---- backtrace ------------------------------------------------------------------------------ */

/* The processes of @pid's job as `list --all` groups them (pyscan), or just @pid. */
static int job_pids(pid_t pid, pid_t **out, int *n)
{
	struct pyscan_proc *procs = NULL;
	const char *job = NULL;
	int np = 0, i, err;

	*n = 0;
	*out = NULL;
	err = pyscan__list(&procs, &np);
	if (err)
		return err;
	for (i = 0; i < np; i++)
		if (procs[i].pid == pid)
			job = procs[i].job;
	*out = calloc(np + 1, sizeof(**out));
	if (!*out) {
		pyscan__free(procs, np);
		return -ENOMEM;
	}
	(*out)[(*n)++] = pid;
	for (i = 0; job && i < np; i++)
		if (procs[i].pid != pid && procs[i].job && !strcmp(procs[i].job, job))
			(*out)[(*n)++] = procs[i].pid;
	pyscan__free(procs, np);
	return 0;
}

/* @pid and its descendants that run Python. */
static int child_pids(pid_t pid, pid_t **out, int *n)
{
	int i, k, err;

	err = jobinfo_descendants(pid, out, n);
	if (err)
		return err;
	for (i = k = 0; i < *n; i++)
		if (!i || live__is_python((*out)[i]) == 1)
			(*out)[k++] = (*out)[i];
	*n = k;
	return 0;
}

static int tool_backtrace(const char *args, struct strbuf *text, bool *is_error)
{
	const char *argv[8];
	bool native, locals, children, job;
	pid_t *pids = NULL;
	int n = 0, i, failed = 0, err;
	long pid;

	if (arg_int(args, "pid", true, 1, INT_MAX, 0, &pid, text) ||
	    arg_bool(args, "native", false, &native, text) ||
	    arg_bool(args, "locals", false, &locals, text) ||
	    arg_bool(args, "children", true, &children, text) ||
	    arg_bool(args, "job", false, &job, text))
		return -EINVAL;
	err = job ? job_pids(pid, &pids, &n) : children ? child_pids(pid, &pids, &n) : 0;
	if (err == -ESRCH) {
		sb_printf(text, "no process %ld", pid);
		*is_error = true;
		return 0;
	}
	if (err) {
		sb_printf(text, "cannot list the processes: %s", strerror(-err));
		*is_error = true;
		return 0;
	}
	if (!job && !children) {
		pids = malloc(sizeof(*pids));
		if (!pids)
			return -ENOMEM;
		pids[n++] = pid;
	}
	if (n > 1)
		sb_printf(text, "%d processes%s\n\n", n,
			  n > MAX_PROCS ? " (the first 32 shown)" : "");
	for (i = 0; i < n && i < MAX_PROCS; i++) {
		struct job_identity id;
		struct subcmd_result r;
		char pidstr[16], label[128];
		int k = 0;

		jobinfo_read(pids[i], &id); /* gone: all unknown, named "pid N" */
		jobinfo_label(&id, pids[i], false, label, sizeof(label));
		jobinfo_free(&id);
		snprintf(pidstr, sizeof(pidstr), "%d", (int)pids[i]);
		argv[k++] = "backtrace";
		argv[k++] = "-p";
		argv[k++] = pidstr;
		if (native)
			argv[k++] = "--native";
		if (locals)
			argv[k++] = "--locals";
		argv[k] = NULL;
		if (n > 1)
			sb_printf(text, "== %s ==\n", label);
		if (run(argv, NULL, BACKTRACE_MS, &r, text)) {
			failed++;
			continue;
		}
		if (r.status)
			failed++;
		append_output(text, &r, r.status != 0);
		if (n > 1)
			sb_puts(text, "\n");
		subcmd__result_free(&r);
	}
	free(pids);
	*is_error = failed == n;
	return 0;
}

/* ---- record_and_summarize ------------------------------------------------------------------- */

/* Run @sql on the recording @db as a table, under a heading. */
static void summary_table(const char *db, const char *heading, const char *sql, struct strbuf *text)
{
	const char *argv[] = {"query", "-i", db, "--timeout", "60", "-", NULL};
	struct subcmd_result r;

	sb_printf(text, "\n## %s\n", heading);
	if (run(argv, sql, 90000, &r, text))
		return;
	append_output(text, &r, r.status != 0);
	subcmd__result_free(&r);
}

/* A frame as the summary names it: Python "qualname (file)", native "func [library]". */
#define FRAME_LABEL                                                                       \
	"CASE f.kind WHEN 'python' THEN coalesce(f.qualname, f.func) || ' (' ||"          \
	" coalesce(f.file, '?') || ')' ELSE f.func || coalesce(' [' || replace(f.module," \
	" rtrim(f.module, replace(f.module, '/', '')), '') || ']', '') END"
/* A Python line: "qualname (file:line)". */
#define LINE_LABEL                                                                \
	"coalesce(f.qualname, f.func) || ' (' || coalesce(f.file, '?') || ':' ||" \
	" coalesce(f.lineno, '?') || ')'"
/* On-CPU samples of the recording (every sample without --off-cpu). */
#define RUNNING "s.state = 'running'"
#define SHARE                                                                        \
	"round(100.0 * SUM(s.count) / (SELECT SUM(count) FROM samples WHERE state =" \
	" 'running'), 1)"
/* Each stack's innermost Python frame (depth). */
#define PY_LEAF                                                                             \
	"(SELECT stack_id, min(depth) AS depth FROM frames WHERE kind = 'python' GROUP BY " \
	"stack_id)"

/*
 * The result of a one-row query on @db as JSON-compact's first row, into @v (@n columns,
 * numbers; NULL as 0). 0, or -EIO.
 */
static int query_numbers(const char *db, const char *sql, double *v, int n)
{
	const char *argv[] = {"query", "-i", db, "-f", "json-compact", "-", NULL};
	struct strbuf text = {0};
	struct subcmd_result r;
	char path[32], *x;
	int i, err = -EIO;

	if (run(argv, sql, 30000, &r, &text)) {
		sb_free(&text);
		return -EIO;
	}
	if (!r.status) {
		for (i = 0, err = 0; i < n; i++) {
			snprintf(path, sizeof(path), "$.rows[0][%d]", i);
			x = jq_text(sb_str(&r.out), path);
			v[i] = x ? strtod(x, NULL) : 0;
			free(x);
		}
	}
	subcmd__result_free(&r);
	sb_free(&text);
	return err;
}

/* Append @err's lines but libbpf's own messages (they are for -vv, not for an assistant). */
static void append_recorder_lines(struct strbuf *text, const struct strbuf *err)
{
	const char *line = sb_str(err), *nl;

	for (; *line; line = nl ? nl + 1 : line + strlen(line)) {
		nl = strchr(line, '\n');
		if (!strncmp(line, "libbpf:", 7))
			continue;
		sb_append(text, line, nl ? (size_t)(nl + 1 - line) : strlen(line));
	}
	if (text->len && text->buf[text->len - 1] != '\n')
		sb_puts(text, "\n");
}

static int tool_record(const char *args, struct strbuf *text, bool *is_error)
{
	const char *argv[16];
	struct subcmd_result r;
	char pidstr[16], secstr[16], hzstr[16], db[128];
	long pid, seconds, hz;
	bool children, off_cpu;
	/* on-CPU samples, threads, duration, off-CPU seconds, off-CPU threads, runnable seconds */
	double t[6] = {0};
	int k = 0;

	if (arg_int(args, "pid", true, 1, INT_MAX, 0, &pid, text) ||
	    arg_int(args, "seconds", false, 1, 600, 5, &seconds, text) ||
	    arg_int(args, "frequency", false, 1, 10000, PROBING_DEFAULT_HZ, &hz, text) ||
	    arg_bool(args, "children", false, &children, text) ||
	    arg_bool(args, "off_cpu", false, &off_cpu, text))
		return -EINVAL;
	pthread_mutex_lock(&recdir_lock);
	if (!recdir[0]) {
		snprintf(recdir, sizeof(recdir), "%s", "/tmp/probing-mcp-XXXXXX");
		if (!mkdtemp(recdir)) {
			sb_printf(text, "cannot make a directory for the recordings: %s",
				  strerror(errno));
			recdir[0] = '\0';
			pthread_mutex_unlock(&recdir_lock);
			*is_error = true;
			return 0;
		}
	}
	snprintf(db, sizeof(db), "%s/pid%ld-%d.db", recdir, pid, ++nrecordings);
	pthread_mutex_unlock(&recdir_lock);
	snprintf(pidstr, sizeof(pidstr), "%ld", pid);
	snprintf(secstr, sizeof(secstr), "%ld", seconds);
	snprintf(hzstr, sizeof(hzstr), "%ld", hz);
	argv[k++] = "record";
	argv[k++] = "-p";
	argv[k++] = pidstr;
	argv[k++] = "-d";
	argv[k++] = secstr;
	argv[k++] = "-F";
	argv[k++] = hzstr;
	argv[k++] = "-o";
	argv[k++] = db;
	if (children)
		argv[k++] = "--children";
	if (off_cpu)
		argv[k++] = "--off-cpu";
	argv[k] = NULL;
	if (run(argv, NULL, (seconds + 60) * 1000, &r, text))
		return -EIO;
	if (r.status || access(db, R_OK)) {
		sb_puts(text, "recording failed:\n");
		append_output(text, &r, true);
		subcmd__result_free(&r);
		*is_error = true;
		return 0;
	}
	query_numbers(
		db,
		"SELECT (SELECT coalesce(SUM(count), 0) FROM samples WHERE state = 'running'),"
		" (SELECT COUNT(DISTINCT tid) FROM samples WHERE state = 'running'),"
		" (SELECT value FROM meta WHERE key = 'duration'),"
		" (SELECT coalesce(SUM(ns), 0) / 1e9 FROM samples WHERE state <> 'running'),"
		" (SELECT COUNT(DISTINCT tid) FROM samples WHERE state <> 'running'),"
		" (SELECT coalesce(SUM(ns), 0) / 1e9 FROM samples WHERE state = 'runnable')",
		t, 6);
	sb_printf(text, "Recorded process %ld%s for %ld s at %ld Hz%s: ", pid,
		  children ? " and its children" : "", seconds, hz,
		  off_cpu ? ", with off-CPU time" : "");
	if (t[0])
		sb_printf(text, "%.0f on-CPU samples (%.1f CPU seconds) in %.0f threads", t[0],
			  t[0] / hz, t[1]);
	else
		sb_puts(text, "no on-CPU samples");
	if (off_cpu)
		sb_printf(text,
			  "; %.1f s of waiting off the CPU in %.0f threads (%.1f s of it runnable: "
			  "ready, waiting for a CPU)",
			  t[3], t[4], t[5]);
	sb_printf(text,
		  ". The recording is %s (the query tool reads it: views samples, frames, "
		  "sample_times, processes, threads, meta; it is removed when this server "
		  "ends).\n",
		  db);
	if (r.err.len) {
		sb_puts(text, "\nThe recorder said:\n");
		append_recorder_lines(text, &r.err);
	}
	subcmd__result_free(&r);
	if (!t[0] && !off_cpu)
		sb_puts(text, "\nNo on-CPU samples: its threads did not run in that time (they "
			      "slept, waited for a lock or for I/O). Call again with off_cpu=true "
			      "to see where they wait.\n");
	if (t[0]) {
		summary_table(db, "Where the CPU time goes: self time (the function running)",
			      "SELECT " FRAME_LABEL " AS function, SUM(s.count) AS samples, " SHARE
			      " AS pct FROM samples s JOIN frames f ON f.stack_id = s.stack_id AND"
			      " f.depth = 0 WHERE " RUNNING
			      " GROUP BY function ORDER BY samples DESC LIMIT 12",
			      text);
		summary_table(db,
			      "Hottest Python lines (the innermost Python frame, with the native "
			      "code it runs)",
			      "SELECT " LINE_LABEL " AS line, SUM(s.count) AS samples, " SHARE
			      " AS pct FROM samples s JOIN " PY_LEAF " l ON l.stack_id = s.stack_id"
			      " JOIN frames f ON f.stack_id = s.stack_id AND f.depth = l.depth"
			      " WHERE " RUNNING " GROUP BY line ORDER BY samples DESC LIMIT 12",
			      text);
	}
	if (off_cpu && t[3] > t[5])
		summary_table(
			db,
			"Where threads wait off the CPU (seconds of wall-clock time, by state: "
			"sleep, lock, io, gil, other)",
			"SELECT s.state, " FRAME_LABEL " AS waits_in, (SELECT " LINE_LABEL
			" FROM frames f JOIN " PY_LEAF " l ON l.stack_id = f.stack_id AND"
			" l.depth = f.depth WHERE f.stack_id = s.stack_id) AS python_line,"
			" COUNT(DISTINCT s.tid) AS threads,"
			" round(SUM(s.ns) / 1e9, 2) AS seconds FROM samples s JOIN frames f ON"
			" f.stack_id = s.stack_id AND f.depth = 0"
			" WHERE s.state NOT IN ('running', 'runnable')"
			" GROUP BY s.state, waits_in, python_line ORDER BY seconds DESC LIMIT 12",
			text);
	if (t[0]) {
		summary_table(db, "Busiest threads (on-CPU samples)",
			      "SELECT s.pid, s.tid, s.thread, SUM(s.count) AS samples, " SHARE
			      " AS pct FROM samples s WHERE " RUNNING " GROUP BY s.pid, s.tid"
			      " ORDER BY samples DESC LIMIT 10",
			      text);
		summary_table(
			db, "Python functions by inclusive time (on the stack, callees included)",
			"SELECT function, SUM(count) AS samples, round(100.0 * SUM(count) /"
			" (SELECT SUM(count) FROM samples WHERE state = 'running'), 1) AS pct"
			" FROM (SELECT DISTINCT s.pid, s.tid, s.stack_id, s.count, " FRAME_LABEL
			" AS function FROM samples s JOIN frames f ON f.stack_id = s.stack_id"
			" WHERE f.kind = 'python' AND " RUNNING
			") GROUP BY function ORDER BY samples DESC LIMIT 10",
			text);
	}
	if (!off_cpu && t[0])
		sb_puts(text, "\n(on-CPU time only: off_cpu=true also records where threads wait, "
			      "and why)\n");
	return 0;
}

/* ---- query ---------------------------------------------------------------------------------- */

static int tool_query(const char *args, struct strbuf *text, bool *is_error)
{
	char *sql = NULL, *file = NULL, *format = NULL, pidstr[16], secs[16];
	const char *argv[12];
	struct subcmd_result r;
	long pid, timeout;
	int k = 0, err;

	err = arg_text(args, "sql", true, &sql, text);
	err = err ?: arg_text(args, "file", false, &file, text);
	err = err ?: arg_int(args, "pid", false, 1, INT_MAX, 0, &pid, text);
	err = err ?: arg_int(args, "timeout", false, 1, 600, 30, &timeout, text);
	err = err ?: arg_text(args, "format", false, &format, text);
	if (!err && !file == !pid) {
		/* The schema cannot say "one of the two": the assistant reads why and calls again. */
		sb_puts(text,
			file ? "give 'file' (a recording) or 'pid' (a live process), not both"
			     : "give 'file' (a recording, e.g. the one record_and_summarize "
			       "made) or 'pid' (a live process): the query runs on one of them");
		*is_error = true;
		goto cleanup;
	}
	if (!err && format && strcmp(format, "table") && strcmp(format, "csv") &&
	    strcmp(format, "json") && strcmp(format, "json-compact")) {
		sb_puts(text, "argument 'format' must be table, csv, json or json-compact");
		err = -EINVAL;
	}
	if (err)
		goto cleanup;
	snprintf(secs, sizeof(secs), "%ld", timeout);
	argv[k++] = "query";
	if (file) {
		argv[k++] = "-i";
		argv[k++] = file;
		argv[k++] = "--timeout";
		argv[k++] = secs;
	} else {
		snprintf(pidstr, sizeof(pidstr), "%ld", pid);
		argv[k++] = "-p";
		argv[k++] = pidstr;
	}
	argv[k++] = "-f";
	argv[k++] = format ? format : "table";
	argv[k++] = "-";
	argv[k] = NULL;
	if (run(argv, sql, (timeout + 10) * 1000, &r, text)) {
		err = -EIO;
		goto cleanup;
	}
	*is_error = r.status != 0 && !r.truncated;
	append_output(text, &r, r.status != 0);
	subcmd__result_free(&r);
cleanup:
	free(sql);
	free(file);
	free(format);
	return err;
}

/* ---- eval ----------------------------------------------------------------------------------- */

static int tool_eval(const char *args, struct strbuf *text, bool *is_error)
{
	char *code = NULL, pidstr[16], secs[16];
	const char *argv[10];
	struct subcmd_result r;
	long pid, timeout;
	int err;

	err = arg_int(args, "pid", true, 1, INT_MAX, 0, &pid, text);
	err = err ?: arg_text(args, "code", true, &code, text);
	err = err ?: arg_int(args, "timeout", false, 1, 300, 5, &timeout, text);
	if (err)
		goto cleanup;
	snprintf(pidstr, sizeof(pidstr), "%ld", pid);
	snprintf(secs, sizeof(secs), "%ld", timeout);
	argv[0] = "eval";
	argv[1] = "-p";
	argv[2] = pidstr;
	argv[3] = "--timeout";
	argv[4] = secs;
	argv[5] = "-";
	argv[6] = NULL;
	if (run(argv, code, (timeout + 60) * 1000, &r, text)) {
		err = -EIO;
		goto cleanup;
	}
	*is_error = r.status != 0;
	append_output(text, &r, true);
	subcmd__result_free(&r);
cleanup:
	free(code);
	return err;
}

/* ---- the table ------------------------------------------------------------------------------ */

static const struct tool {
	const char *name;
	const char *description;
	const char *schema; /* the inputSchema, JSON */
	const char *const *keys;
	int (*run)(const char *args, struct strbuf *text, bool *is_error);
	const char *annotations;
	bool eval;
} tools[] = {
	{
		"list_processes",
		"List the Python processes on this machine that this server may inspect, with or "
		"without the probing agent, grouped by distributed job (torchrun, Slurm, MPI): "
		"pid, ppid, uid, command, rank, local_rank, world_size, job, whether the agent "
		"runs "
		"in it. JSON with 'processes' and 'jobs'.",
		"{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
		(const char *const[]){NULL},
		tool_list,
		"{\"readOnlyHint\":true,\"openWorldHint\":false}",
	},
	{
		"backtrace",
		"Every thread's current stack of a running process, read from outside without "
		"stopping it: Python frames (function, file, line), with native=true native frames "
		"too, with locals=true each Python frame's local variables. Job-aware: by default "
		"the process's Python children as well (a launcher's ranks); with job=true every "
		"process of its job. Use it to see where a process or a distributed job is stuck.",
		"{\"type\":\"object\",\"properties\":{"
		"\"pid\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"the process\"},"
		"\"native\":{\"type\":\"boolean\",\"default\":false,\"description\":\"native "
		"frames "
		"too (holds each thread well under a millisecond; needs ptrace rights)\"},"
		"\"locals\":{\"type\":\"boolean\",\"default\":false,\"description\":\"each "
		"Python frame's local variables too (names and short reprs, read from outside)\"},"
		"\"children\":{\"type\":\"boolean\",\"default\":true,\"description\":\"also its "
		"descendants that run Python\"},"
		"\"job\":{\"type\":\"boolean\",\"default\":false,\"description\":\"also every "
		"other "
		"process of its job (as list_processes groups them)\"}},"
		"\"required\":[\"pid\"],\"additionalProperties\":false}",
		(const char *const[]){"pid", "native", "locals", "children", "job", NULL},
		tool_backtrace,
		"{\"readOnlyHint\":true,\"openWorldHint\":false}",
	},
	{
		"record_and_summarize",
		"Sample a running process's native and Python stacks for some seconds (eBPF; needs "
		"root or CAP_BPF+CAP_PERFMON+CAP_SYS_PTRACE) and summarize: where the CPU time "
		"goes (self time), the hottest Python lines, with off_cpu=true where threads wait "
		"and why, the busiest threads and the Python functions by inclusive time. The "
		"recording is kept for the query tool until this server ends. A call lasts "
		"'seconds' and a few more: to a request with a progressToken a progress "
		"notification is sent every 5 s (a client with a 60 s request timeout needs them, "
		"e.g. the TypeScript SDK's resetTimeoutOnProgress, for seconds over about 50).",
		"{\"type\":\"object\",\"properties\":{"
		"\"pid\":{\"type\":\"integer\",\"minimum\":1},"
		"\"seconds\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":600,\"default\":5},"
		"\"frequency\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10000,"
		"\"default\":" PROBING_DEFAULT_HZ_STR ",\"description\":\"samples per second\"},"
		"\"children\":{\"type\":\"boolean\",\"default\":false,\"description\":\"also "
		"child processes started while recording\"},"
		"\"off_cpu\":{\"type\":\"boolean\",\"default\":false,\"description\":\"also "
		"record where threads wait off the CPU, and why (sleep, lock, io, gil): for a "
		"process that is slow or stuck without using CPU\"}},"
		"\"required\":[\"pid\"],\"additionalProperties\":false}",
		(const char *const[]){"pid", "seconds", "frequency", "children", "off_cpu", NULL},
		tool_record,
		"{\"readOnlyHint\":false,\"destructiveHint\":false,\"openWorldHint\":false}",
	},
	{
		"query",
		"Run SQL (SQLite) on a recording file (read-only: views samples(pid, tid, thread, "
		"stack_id, count), frames(stack_id, depth, kind, func, file, lineno, module, "
		"qualname; depth 0 = leaf), sample_times, processes, threads, meta) or on the live "
		"tables of a running process (python.backtrace, system.threads, system.process; "
		"with the agent python.torch_trace and more). Stopped after 'timeout' seconds.",
		"{\"type\":\"object\",\"properties\":{"
		"\"sql\":{\"type\":\"string\"},"
		"\"file\":{\"type\":\"string\",\"description\":\"a recording (probing record -o)"
		"\"},"
		"\"pid\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"a live process "
		"instead of a file\"},"
		"\"timeout\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":600,\"default\":30},"
		"\"format\":{\"enum\":[\"table\",\"csv\",\"json\",\"json-compact\"],"
		"\"default\":\"table\"}},"
		"\"required\":[\"sql\"],\"additionalProperties\":false}",
		(const char *const[]){"sql", "file", "pid", "timeout", "format", NULL},
		tool_query,
		"{\"readOnlyHint\":true,\"openWorldHint\":false}",
	},
	{
		"eval",
		"Run Python code inside a running process (its __main__ namespace), loading the "
		"probing agent into it with ptrace if needed: an expression's repr(), or what "
		"statements print. It changes the process if the code does: use with care.",
		"{\"type\":\"object\",\"properties\":{"
		"\"pid\":{\"type\":\"integer\",\"minimum\":1},"
		"\"code\":{\"type\":\"string\"},"
		"\"timeout\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":300,\"default\":5,"
		"\"description\":\"seconds to wait for the GIL\"}},"
		"\"required\":[\"pid\",\"code\"],\"additionalProperties\":false}",
		(const char *const[]){"pid", "code", "timeout", NULL},
		tool_eval,
		"{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":false}",
		true,
	},
};

static bool offered(const struct tool *t)
{
	return !t->eval || opts.allow_eval;
}

int tools__list(struct strbuf *out)
{
	size_t i;
	int err, n = 0;

	err = sb_puts(out, "[");
	for (i = 0; !err && i < ARRAY_SIZE(tools); i++) {
		if (!offered(&tools[i]))
			continue;
		err = sb_printf(out, "%s{\"name\":\"%s\",\"description\":", n++ ? "," : "",
				tools[i].name);
		err = err ?: json_string(out, tools[i].description, strlen(tools[i].description));
		err = err
			      ?: sb_printf(out, ",\"inputSchema\":%s,\"annotations\":%s}",
					   tools[i].schema, tools[i].annotations);
	}
	return err ?: sb_puts(out, "]");
}

bool tools__offered(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
		if (!strcmp(tools[i].name, name) && offered(&tools[i]))
			return true;
	return false;
}

int tools__call(const char *name, const char *args, struct tool_call *call, struct strbuf *text,
		bool *is_error)
{
	const struct tool *t = NULL;
	char *unknown;
	size_t i;
	int err;

	*is_error = false;
	for (i = 0; i < ARRAY_SIZE(tools) && !t; i++)
		if (!strcmp(tools[i].name, name) && offered(&tools[i]))
			t = &tools[i];
	if (!t) {
		if (!strcmp(name, "eval"))
			sb_puts(text, "the eval tool is offered only when the server was started "
				      "with 'probing mcp --allow-eval'");
		else
			sb_printf(text, "no tool named '%.64s'", name);
		return -ENOENT;
	}
	if (!args)
		args = "{}";
	if (strcmp(jq_type(args, "$") ?: "", "object")) {
		sb_puts(text, "the arguments must be a JSON object");
		return -EINVAL;
	}
	unknown = jq_unknown_key(args, t->keys);
	if (unknown) {
		sb_printf(text, "%s takes no argument '%.64s'", t->name, unknown);
		free(unknown);
		return -EINVAL;
	}
	current = call;
	err = t->run(args, text, is_error);
	current = NULL;
	return err;
}

void tools__cleanup(void)
{
	struct dirent *d;
	char path[PATH_MAX];
	DIR *dir;

	if (!recdir[0])
		return;
	dir = opendir(recdir);
	while (dir && (d = readdir(dir))) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", recdir, d->d_name);
		unlink(path);
	}
	if (dir)
		closedir(dir);
	rmdir(recdir);
	recdir[0] = '\0';
}
