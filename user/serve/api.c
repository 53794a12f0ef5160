// SPDX-License-Identifier: MIT
/* api: the URLs of `probing serve`, answered with probing's own commands. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/escape.h"
#include "base/subcmd.h"
#include "base/util.h"
#include "report/profile.h"
#include "report/recording.h"
#include "serve/api.h"
#include "serve/assets.h"

#define JSON_MAX_OUT	(4u << 20)   /* a query's rows shown in the page: the first 4 MiB */
#define CSV_MAX_OUT	(256u << 20) /* a CSV download */
#define SLOW_TIMEOUT_MS 120000	     /* flame graphs, exports */
#define LIVE_TIMEOUT_MS 30000	     /* backtraces, process lists */
#define MAX_RUNNING	64

static const char *const *files;
static int nfiles;

/* The commands running for requests: for "cancel" (by the page's id) and for shutdown. */
static struct running {
	pid_t pid;
	char id[65];
	bool cancelled;
} running[MAX_RUNNING];
static pthread_mutex_t running_lock = PTHREAD_MUTEX_INITIALIZER;

void api__init(const char *const *f, int n)
{
	files = f;
	nfiles = n;
}

/* ---- responses ------------------------------------------------------------------------------ */

/* {"error": MESSAGE} with @status. */
static void fail(struct http_resp *resp, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail(struct http_resp *resp, int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sb_reset(&resp->body);
	resp->status = status;
	resp->type = "application/json";
	sb_puts(&resp->body, "{\"error\":");
	json_string(&resp->body, msg, strlen(msg));
	sb_puts(&resp->body, "}\n");
}

/* A command's failure as plain text (what it printed on stderr), for the SVG and text views. */
static void fail_text(struct http_resp *resp, int status, const struct subcmd_result *r,
		      const char *what)
{
	sb_reset(&resp->body);
	resp->status = status;
	resp->type = "text/plain; charset=utf-8";
	if (r && r->timed_out)
		sb_printf(&resp->body, "%s took too long and was stopped\n", what);
	if (r && r->err.len)
		sb_append(&resp->body, r->err.buf, r->err.len);
	else if (r && !r->timed_out)
		sb_printf(&resp->body, "%s failed (exit status %d)\n", what, r->status);
}

/* ---- arguments ------------------------------------------------------------------------------ */

/* Query argument @name as an integer in [lo, hi] into *@out; 0 if absent (out unchanged),
 * 1 if read, -1 after answering 400. */
static int int_arg(struct http_req *req, struct http_resp *resp, const char *name, long lo, long hi,
		   long *out)
{
	const char *v = http_arg(req, name);

	if (!v || !*v)
		return 0;
	if (parse_long(v, lo, hi, out)) {
		fail(resp, 400, "invalid %s '%.40s': expected a number from %ld to %ld", name, v,
		     lo, hi);
		return -1;
	}
	return 1;
}

/* Refuse query arguments the URL does not take. 0, or -1 after answering 400. */
static int check_args(struct http_req *req, struct http_resp *resp, const char *const *allowed)
{
	const char *bad = http_unknown_arg(req, allowed);

	if (!bad)
		return 0;
	fail(resp, 400, "unknown parameter '%.40s' for %s", bad, req->path);
	return -1;
}

/*
 * The source of a query: "f<N>" (recording number N) or "p<PID>" (a live process), into
 * *@file (-1 for a process) and *@pid. 0, or -1 after answering 400.
 */
static int source_arg(struct http_req *req, struct http_resp *resp, int *file, long *pid)
{
	const char *v = http_arg(req, "src");
	long n;

	*file = -1;
	*pid = 0;
	if (v && v[0] == 'f' && !parse_long(v + 1, 0, nfiles - 1, &n) && nfiles) {
		*file = n;
		return 0;
	}
	if (v && v[0] == 'p' && !parse_long(v + 1, 1, INT_MAX, &n)) {
		*pid = n;
		return 0;
	}
	fail(resp, 400,
	     "invalid src '%.40s': expected f<N> (recording N, from 0 to %d) or p<PID> (a live "
	     "process)",
	     v ? v : "", nfiles - 1);
	return -1;
}

/* ---- running commands ----------------------------------------------------------------------- */

struct run_ctx {
	const char *id; /* the page's name for it, or NULL */
	int slot;
	bool cancelled; /* a cancel request stopped it (known once it is reaped) */
};

static void track(pid_t pid, void *arg)
{
	struct run_ctx *c = arg;
	int i;

	pthread_mutex_lock(&running_lock);
	if (pid) {
		c->slot = -1;
		for (i = 0; i < MAX_RUNNING; i++) {
			if (!running[i].pid) {
				running[i].pid = pid;
				running[i].cancelled = false;
				snprintf(running[i].id, sizeof(running[i].id), "%s",
					 c->id ? c->id : "");
				c->slot = i;
				break;
			}
		}
	} else if (c->slot >= 0) {
		/* Reaped: the pid may be reused from now on, forget it first. */
		c->cancelled = running[c->slot].cancelled;
		running[c->slot].pid = 0;
	}
	pthread_mutex_unlock(&running_lock);
}

/*
 * Run `probing ARGS` for @req: its client hanging up stops it. *@cancelled (may be NULL) says
 * whether a cancel request stopped it. 0 or -errno (could not start: answered 500).
 */
static int run(struct http_req *req, struct http_resp *resp, const char *const *args,
	       const char *input, size_t max_out, int timeout_ms, const char *id,
	       struct subcmd_result *r, bool *cancelled)
{
	struct run_ctx c = {.id = id, .slot = -1};
	struct subcmd_opts o = {.input = input,
				.input_len = input ? strlen(input) : 0,
				.max_out = max_out,
				.timeout_ms = timeout_ms,
				.watch_fd = req->fd,
				.on_pid = track,
				.ctx = &c};
	int err;

	err = subcmd__run(args, &o, r);
	if (cancelled)
		*cancelled = false;
	if (err) {
		fail(resp, 500, "cannot run probing %s: %s", args[0], strerror(-err));
		return err;
	}
	if (cancelled)
		*cancelled = r->hung_up || c.cancelled;
	return 0;
}

/* ---- /api/files ----------------------------------------------------------------------------- */

static void api_files(struct http_req *req, struct http_resp *resp)
{
	static const char *const allowed[] = {NULL};
	struct strbuf *b = &resp->body;
	int i;

	if (check_args(req, resp, allowed))
		return;
	sb_printf(b, "{\"version\":\"%s\",\"files\":[", PROBING_VERSION);
	for (i = 0; i < nfiles; i++) {
		const char *slash = strrchr(files[i], '/');

		sb_printf(b, "%s{\"src\":\"f%d\",\"name\":", i ? "," : "", i);
		json_string(b, slash ? slash + 1 : files[i], strlen(slash ? slash + 1 : files[i]));
		sb_puts(b, ",\"path\":");
		json_string(b, files[i], strlen(files[i]));
		sb_puts(b, "}");
	}
	sb_puts(b, "]}\n");
}

/* ---- /api/query ----------------------------------------------------------------------------- */

/*
 * The output of `query -f json-compact` (one object per statement, each starting on a line
 * of its own with {"columns":) as one JSON array. Output cut at the size limit is closed after
 * its last whole row.
 */
static int results_array(struct strbuf *b, struct strbuf *out, bool truncated)
{
	char *text = out->buf, *p, *nl;
	size_t len = out->len;
	int err, n = 0;

	if (!text)
		return sb_puts(b, "[]");
	if (truncated) {
		nl = memrchr(text, '\n', len);
		len = nl ? (size_t)(nl - text) : 0;
		while (len && text[len - 1] == ',')
			len--;
	}
	text[len] = '\0';
	err = sb_puts(b, "[");
	for (p = text; !err && *p;) {
		char *next = strstr(p + 1, "\n{\"columns\":");
		size_t n1 = next ? (size_t)(next - p) : strlen(p);

		while (n1 && (p[n1 - 1] == '\n'))
			n1--;
		if (n1) {
			err = sb_puts(b, n++ ? ",\n" : "\n");
			err = err ?: sb_append(b, p, n1);
			/* The one cut short: close its rows and object. */
			if (!err && !next && truncated && (n1 < 2 || strcmp(p + n1 - 2, "]}")))
				err = sb_puts(b, "]}");
		}
		p = next ? next + 1 : p + strlen(p);
	}
	return err ?: sb_puts(b, "]");
}

static void api_query(struct http_req *req, struct http_resp *resp)
{
	static const char *const allowed[] = {"src", "format", "timeout", "id", NULL};
	const char *format = http_arg(req, "format"), *id = http_arg(req, "id"), *p;
	const char *args[12];
	struct subcmd_result r;
	char target[32], secs[16];
	bool csv, cancelled;
	long timeout = API_QUERY_TIMEOUT_S, pid;
	uint64_t t0 = now_mono_ns();
	int file, n = 0;

	if (check_args(req, resp, allowed) || source_arg(req, resp, &file, &pid) ||
	    int_arg(req, resp, "timeout", 1, API_MAX_QUERY_TIMEOUT_S, &timeout) < 0)
		return;
	if (strcmp(req->method, "POST")) {
		fail(resp, 405, "send the SQL as the body of a POST request");
		return;
	}
	if (format && strcmp(format, "json") && strcmp(format, "csv")) {
		fail(resp, 400, "invalid format '%.20s': json or csv", format);
		return;
	}
	csv = format && !strcmp(format, "csv");
	for (p = id; p && *p; p++) {
		if (!(*p == '-' || *p == '_' || (*p >= '0' && *p <= '9') ||
		      ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z')) ||
		    p - id >= 64) {
			fail(resp, 400, "invalid id: letters, digits, '-' and '_', at most 64");
			return;
		}
	}
	if (strspn(sb_str(&req->body), " \t\r\n") == req->body.len) {
		fail(resp, 400, "the SQL is empty");
		return;
	}
	if (memchr(sb_str(&req->body), '\0', req->body.len)) {
		fail(resp, 400, "the SQL holds a NUL byte");
		return;
	}
	snprintf(secs, sizeof(secs), "%ld", timeout);
	args[n++] = "query";
	if (file >= 0) {
		args[n++] = "-i";
		args[n++] = files[file];
		/* The command stops the SQL itself and says so; the time limit of run() is the
		 * backstop (and the only one for a live process). */
		args[n++] = "--timeout";
		args[n++] = secs;
	} else {
		snprintf(target, sizeof(target), "%ld", pid);
		args[n++] = "-p";
		args[n++] = target;
	}
	args[n++] = "-f";
	args[n++] = csv ? "csv" : "json-compact";
	args[n++] = "-";
	args[n] = NULL;
	if (run(req, resp, args, sb_str(&req->body), csv ? CSV_MAX_OUT : JSON_MAX_OUT,
		(int)timeout * 1000 + 5000, id, &r, &cancelled))
		return;
	if (csv) {
		if (r.status || r.truncated) {
			fail(resp, 400, "%s",
			     r.truncated ? "the result is larger than 256 MiB: narrow the query, "
					   "or run 'probing query -f csv' on the command line"
			     : cancelled ? "the query was cancelled"
					 : sb_str(&r.err));
		} else {
			resp->type = "text/csv; charset=utf-8";
			snprintf(resp->disposition, sizeof(resp->disposition),
				 "attachment; filename=\"query.csv\"");
			sb_append(&resp->body, sb_str(&r.out), r.out.len);
		}
		subcmd__result_free(&r);
		return;
	}
	/* {"ok", "results": [...], "truncated", "error", "timed_out", "cancelled", "ms"} */
	resp->status = r.status && !r.truncated ? 400 : 200;
	sb_printf(&resp->body,
		  "{\"ok\":%s,\"results\":", !r.status || r.truncated ? "true" : "false");
	results_array(&resp->body, &r.out, r.truncated);
	sb_printf(&resp->body, ",\"truncated\":%s,\"cancelled\":%s,\"timed_out\":%s,\"ms\":%.1f",
		  r.truncated ? "true" : "false", cancelled ? "true" : "false",
		  r.timed_out || strstr(sb_str(&r.err), "longer than the time limit") ? "true"
										      : "false",
		  (now_mono_ns() - t0) / 1e6);
	if (r.status && !r.truncated) {
		sb_puts(&resp->body, ",\"error\":");
		if (cancelled)
			sb_puts(&resp->body, "\"the query was cancelled\"");
		else if (r.timed_out)
			sb_printf(&resp->body,
				  "\"the query ran longer than %ld s and was stopped\"", timeout);
		else
			json_string(&resp->body, sb_str(&r.err), r.err.len);
	}
	sb_puts(&resp->body, "}\n");
	subcmd__result_free(&r);
}

/* ---- /api/cancel ---------------------------------------------------------------------------- */

static void api_cancel(struct http_req *req, struct http_resp *resp)
{
	static const char *const allowed[] = {"id", NULL};
	const char *id = http_arg(req, "id");
	int i, found = 0;

	if (check_args(req, resp, allowed))
		return;
	if (strcmp(req->method, "POST")) {
		fail(resp, 405, "cancel with a POST request");
		return;
	}
	if (!id || !*id) {
		fail(resp, 400, "which query? give its id");
		return;
	}
	pthread_mutex_lock(&running_lock);
	for (i = 0; i < MAX_RUNNING; i++) {
		if (running[i].pid && !strcmp(running[i].id, id)) {
			running[i].cancelled = true;
			subcmd__stop(running[i].pid);
			found++;
		}
	}
	pthread_mutex_unlock(&running_lock);
	if (!found) {
		fail(resp, 404, "no query with id '%.64s' is running (it may have just ended)", id);
		return;
	}
	sb_puts(&resp->body, "{\"cancelled\":true}\n");
}

/* ---- /api/flamegraph ------------------------------------------------------------------------ */

static const char svg_csp[] = "default-src 'none'; script-src 'unsafe-inline'; "
			      "style-src 'unsafe-inline'; frame-ancestors 'self'";

/* Append "--OPT VALUE" for query argument @name when present, checked to be a number. */
static int number_opt(struct http_req *req, struct http_resp *resp, const char *name,
		      const char *opt, const char **args, int *n, char *buf, size_t size)
{
	const char *v = http_arg(req, name);
	double d;
	char *end;

	if (!v || !*v)
		return 0;
	errno = 0;
	d = strtod(v, &end);
	if (*end || errno || !(d >= 0 && d <= 1e9) || strlen(v) >= size) {
		fail(resp, 400, "invalid %s '%.40s': expected a number, 0 or more", name, v);
		return -1;
	}
	snprintf(buf, size, "%s", v);
	args[(*n)++] = opt;
	args[(*n)++] = buf;
	return 0;
}

static void api_flamegraph(struct http_req *req, struct http_resp *resp)
{
	static const char *const allowed[] = {"f",     "pid",	"tid",	    "rank", "state",
					      "from",  "to",	"inverted", "diff", "diff_ranks",
					      "width", "title", NULL};
	const char *args[40], *state = http_arg(req, "state"), *dr = http_arg(req, "diff_ranks");
	const char *title = http_arg(req, "title");
	char num[8][32];
	struct subcmd_result r;
	long f = -1, v, diff = -1;
	int n = 0, k = 0, i;

	if (check_args(req, resp, allowed))
		return;
	if (int_arg(req, resp, "f", 0, nfiles - 1, &f) <= 0) {
		if (!resp->status)
			fail(resp, 400, "which recording? give f=N (0 to %d)", nfiles - 1);
		return;
	}
	args[n++] = "flamegraph";
	args[n++] = "-i";
	args[n++] = files[f];
	static const struct {
		const char *name, *opt;
		long lo, hi;
	} ints[] = {
		{"pid", "--pid", 1, INT_MAX},
		{"tid", "--tid", 1, INT_MAX},
		{"rank", "--rank", 0, INT_MAX},
		{"width", "--width", 200, 10000},
	};
	for (i = 0; i < (int)ARRAY_SIZE(ints); i++) {
		int got = int_arg(req, resp, ints[i].name, ints[i].lo, ints[i].hi, &v);

		if (got < 0)
			return;
		if (got) {
			snprintf(num[k], sizeof(num[k]), "%ld", v);
			args[n++] = ints[i].opt;
			args[n++] = num[k++];
		}
	}
	if (number_opt(req, resp, "from", "--from", args, &n, num[k], sizeof(num[k])))
		return;
	k++;
	if (number_opt(req, resp, "to", "--to", args, &n, num[k], sizeof(num[k])))
		return;
	k++;
	if (state && *state) {
		/* The command checks the name; keep it a plain word here. */
		if (strspn(state, "abcdefghijklmnopqrstuvwxyz") != strlen(state) ||
		    strlen(state) > 16) {
			fail(resp, 400, "invalid state '%.20s'", state);
			return;
		}
		args[n++] = "--state";
		args[n++] = state;
	}
	if (int_arg(req, resp, "diff", 0, nfiles - 1, &diff) < 0)
		return;
	if (diff >= 0) {
		args[n++] = "--diff";
		args[n++] = files[diff];
	}
	if (dr && *dr) {
		if (strspn(dr, "0123456789,") != strlen(dr) || strlen(dr) > 24) {
			fail(resp, 400, "invalid diff_ranks '%.30s': A,B", dr);
			return;
		}
		args[n++] = "--diff-ranks";
		args[n++] = dr;
	}
	if (http_arg(req, "inverted") && strcmp(http_arg(req, "inverted"), "0"))
		args[n++] = "--inverted";
	if (title && *title) {
		args[n++] = "--title";
		args[n++] = title;
	}
	args[n] = NULL;
	if (run(req, resp, args, NULL, 0, SLOW_TIMEOUT_MS, NULL, &r, NULL))
		return;
	if (r.status || r.truncated) {
		/* Shown in the page's frame, where the page reads it to show it inline. */
		fail_text(resp, 400, &r, "drawing the flame graph");
		resp->csp = svg_csp;
		resp->frame_ok = true;
	} else {
		resp->type = "image/svg+xml";
		resp->csp = svg_csp;
		resp->frame_ok = true;
		sb_append(&resp->body, sb_str(&r.out), r.out.len);
	}
	subcmd__result_free(&r);
}

/* ---- /api/timeline ------------------------------------------------------------------------- */

/* sqlite3_progress_handler: stop once the deadline (CLOCK_MONOTONIC ns) has passed. */
static int past_deadline(void *deadline)
{
	return now_mono_ns() >= *(uint64_t *)deadline;
}

/*
 * Samples per second (profile__per_second) of recording f=N with the flame graph's filters,
 * read here rather than by a command: one aggregate over a read-only connection.
 */
static void api_timeline(struct http_req *req, struct http_resp *resp)
{
	static const char *const allowed[] = {"f", "pid", "tid", "rank", "state", NULL};
	struct profile_filter flt = {0};
	struct profile_second *secs = NULL;
	const char *state = http_arg(req, "state");
	uint64_t deadline = now_mono_ns() + (uint64_t)SLOW_TIMEOUT_MS * 1000000;
	sqlite3 *db = NULL;
	size_t n = 0, i;
	int64_t t0 = 0;
	long f, v;
	int err, got;

	if (check_args(req, resp, allowed))
		return;
	if ((got = int_arg(req, resp, "f", 0, nfiles - 1, &f)) <= 0) {
		if (!got)
			fail(resp, 400, "which recording? give f=N (0 to %d)", nfiles - 1);
		return;
	}
	if ((got = int_arg(req, resp, "pid", 1, INT_MAX, &v)) < 0)
		return;
	flt.pid = got ? v : 0;
	if ((got = int_arg(req, resp, "tid", 1, INT_MAX, &v)) < 0)
		return;
	flt.tid = got ? v : 0;
	if ((got = int_arg(req, resp, "rank", 0, INT_MAX, &v)) < 0)
		return;
	if (got) {
		flt.flags |= PROFILE_RANK;
		flt.rank = v;
	}
	if (state && *state) {
		if (profile__state_code(state, NULL)) {
			fail(resp, 400, "unknown state '%.20s'", state);
			return;
		}
		flt.state = state;
	}
	if (recording__open(files[f], &db)) {
		fail(resp, 500, "cannot open %s (the server's log says why)", files[f]);
		return;
	}
	sqlite3_progress_handler(db, 1000, past_deadline, &deadline);
	err = profile__per_second(db, &flt, &secs, &n, &t0);
	if (err && now_mono_ns() >= deadline) {
		fail(resp, 503,
		     "timed out: reading the samples per second of %s took more than "
		     "%d s; it stopped there",
		     files[f], SLOW_TIMEOUT_MS / 1000);
		goto cleanup;
	}
	if (err) {
		fail(resp, err == -EINVAL ? 400 : 500, "cannot read the samples per second of %s%s",
		     files[f], err == -EINVAL ? ": the recording has no thread states" : "");
		goto cleanup;
	}
	sb_printf(&resp->body, "{\"t0\":%lld,\"states\":%s,\"seconds\":[", (long long)t0,
		  profile__has_states(db) == 1 ? "true" : "false");
	for (i = 0; i < n; i++)
		sb_printf(&resp->body, "%s[%lld,%llu]", i ? "," : "", (long long)secs[i].t,
			  (unsigned long long)secs[i].count);
	sb_puts(&resp->body, "]}\n");
cleanup:
	free(secs);
	recording__close(db);
}

/* ---- live: /api/processes, /api/backtrace, /api/chrome -------------------------------------- */

static void api_processes(struct http_req *req, struct http_resp *resp)
{
	static const char *const allowed[] = {NULL};
	static const char *const args[] = {"list", "--all", "--format", "json", NULL};
	struct subcmd_result r;

	if (check_args(req, resp, allowed) ||
	    run(req, resp, args, NULL, 0, LIVE_TIMEOUT_MS, NULL, &r, NULL))
		return;
	if (r.status || r.truncated)
		fail(resp, 500, "cannot list the processes: %s", sb_str(&r.err));
	else
		sb_append(&resp->body, sb_str(&r.out), r.out.len);
	subcmd__result_free(&r);
}

static void api_backtrace(struct http_req *req, struct http_resp *resp)
{
	static const char *const allowed[] = {"pid", "native", "locals", NULL};
	const char *args[8];
	struct subcmd_result r;
	char pidstr[16];
	long pid;
	int n = 0;

	if (check_args(req, resp, allowed))
		return;
	if (int_arg(req, resp, "pid", 1, INT_MAX, &pid) <= 0) {
		if (!resp->status)
			fail(resp, 400, "which process? give pid=N");
		return;
	}
	snprintf(pidstr, sizeof(pidstr), "%ld", pid);
	args[n++] = "backtrace";
	args[n++] = "-p";
	args[n++] = pidstr;
	if (http_arg(req, "native") && strcmp(http_arg(req, "native"), "0"))
		args[n++] = "--native";
	if (http_arg(req, "locals") && strcmp(http_arg(req, "locals"), "0"))
		args[n++] = "--locals";
	args[n] = NULL;
	if (run(req, resp, args, NULL, 0, LIVE_TIMEOUT_MS, NULL, &r, NULL))
		return;
	if (r.status || r.truncated) {
		fail_text(resp, 400, &r, "reading the backtrace");
	} else {
		resp->type = "text/plain; charset=utf-8";
		sb_append(&resp->body, sb_str(&r.out), r.out.len);
	}
	subcmd__result_free(&r);
}

static void api_chrome(struct http_req *req, struct http_resp *resp)
{
	static const char *const allowed[] = {"src", NULL};
	const char *args[10];
	struct subcmd_result r;
	char target[32];
	long pid;
	int file, n = 0;

	if (check_args(req, resp, allowed) || source_arg(req, resp, &file, &pid))
		return;
	args[n++] = "export";
	if (file >= 0) {
		args[n++] = "-i";
		args[n++] = files[file];
		snprintf(target, sizeof(target), "f%d", file);
	} else {
		snprintf(target, sizeof(target), "%ld", pid);
		args[n++] = "-p";
		args[n++] = target;
	}
	args[n++] = "--format";
	args[n++] = "chrome";
	args[n++] = "-o";
	args[n++] = "-";
	args[n] = NULL;
	if (run(req, resp, args, NULL, CSV_MAX_OUT, SLOW_TIMEOUT_MS, NULL, &r, NULL))
		return;
	if (r.status || r.truncated) {
		fail_text(resp, 400, &r, "exporting the PyTorch trace");
	} else {
		resp->type = "application/json";
		snprintf(resp->disposition, sizeof(resp->disposition),
			 "attachment; filename=\"torch-trace-%s.json\"", target);
		sb_append(&resp->body, sb_str(&r.out), r.out.len);
	}
	subcmd__result_free(&r);
}

/* ---- routing -------------------------------------------------------------------------------- */

static const struct {
	const char *path;
	void (*fn)(struct http_req *req, struct http_resp *resp);
} routes[] = {
	{"/api/files", api_files},	   {"/api/query", api_query},
	{"/api/cancel", api_cancel},	   {"/api/flamegraph", api_flamegraph},
	{"/api/processes", api_processes}, {"/api/backtrace", api_backtrace},
	{"/api/chrome", api_chrome},	   {"/api/timeline", api_timeline},
};

void api__handle(struct http_req *req, struct http_resp *resp)
{
	const struct asset *a;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(routes); i++) {
		if (!strcmp(req->path, routes[i].path)) {
			routes[i].fn(req, resp);
			return;
		}
	}
	a = assets__find(req->path);
	if (a && !strcmp(req->method, "GET")) {
		resp->type = a->type;
		sb_append(&resp->body, a->data, strlen(a->data));
		return;
	}
	fail(resp, 404, "no such page: %.100s", req->path);
}

void api__stop_all(void)
{
	int i;

	pthread_mutex_lock(&running_lock);
	for (i = 0; i < MAX_RUNNING; i++)
		if (running[i].pid)
			subcmd__stop(running[i].pid);
	pthread_mutex_unlock(&running_lock);
}
