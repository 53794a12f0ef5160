// SPDX-License-Identifier: MIT
/*
 * mcp: JSON-RPC 2.0 over stdio for the Model Context Protocol. The reading thread answers
 * initialize, ping and tools/list itself and starts a thread for each tools/call (up to
 * MCP_MAX_CALLS at once), so that a long call (record_and_summarize for a minute) neither
 * holds the others nor a ping back, and a notifications/cancelled can stop it. Answers are
 * written whole, one at a time (out_lock), in the order they are ready.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"
#include "base/escape.h"
#include "base/jsonq.h"
#include "base/log.h"
#include "mcp/mcp.h"
#include "mcp/tools.h"

/* JSON-RPC 2.0 error codes. */
#define PARSE_ERROR	 -32700
#define INVALID_REQUEST	 -32600
#define METHOD_NOT_FOUND -32601
#define INVALID_PARAMS	 -32602
#define INTERNAL_ERROR	 -32603

/* Server error (JSON-RPC's range for them): all MCP_MAX_CALLS slots are taken. */
#define SERVER_BUSY -32000

static volatile sig_atomic_t stopping;

/* A tools/call in progress. busy and done change under calls_lock; call is read by anyone. */
struct call_slot {
	bool busy; /* a thread was started for it and is not joined yet */
	bool done; /* that thread has ended: join it before the slot is used again */
	pthread_t thread;
	FILE *out;
	char *id;  /* the request's id, as JSON text */
	char *msg; /* the request */
	struct tool_call call;
};

static struct call_slot slots[MCP_MAX_CALLS];
static pthread_mutex_t calls_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile sig_atomic_t out_failed; /* a call thread could not write its answer */

void mcp__stop(void)
{
	stopping = 1;
	for (size_t i = 0; i < ARRAY_SIZE(slots); i++)
		tools__cancel(&slots[i].call);
}

/* The protocol versions spoken, newest first: a client's is answered in kind if listed. */
static const char *const versions[] = {"2025-06-18", "2025-03-26", "2024-11-05"};

static int send_line(FILE *out, const struct strbuf *msg)
{
	int err = 0;

	pthread_mutex_lock(&out_lock);
	if (fwrite(sb_str(msg), 1, msg->len, out) != msg->len || fputc('\n', out) == EOF ||
	    fflush(out))
		err = -EIO;
	pthread_mutex_unlock(&out_lock);
	return err;
}

/* {"jsonrpc":"2.0","id":ID,"result":RESULT}; @id is JSON text as it came. */
static int send_result(FILE *out, const char *id, const char *result)
{
	struct strbuf m = {0};
	int err;

	err = sb_printf(&m, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}", id, result);
	err = err ?: send_line(out, &m);
	sb_free(&m);
	return err;
}

static int send_error(FILE *out, const char *id, int code, const char *msg)
{
	struct strbuf m = {0};
	int err;

	err = sb_printf(&m, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":%d,\"message\":",
			id ? id : "null", code);
	err = err ?: json_string(&m, msg, strlen(msg));
	err = err ?: sb_puts(&m, "}}");
	err = err ?: send_line(out, &m);
	sb_free(&m);
	return err;
}

/* ---- methods -------------------------------------------------------------------------------- */

static const char instructions[] =
	"probing looks into running Python processes on this machine: list_processes finds them "
	"(grouped by distributed job), backtrace shows where every thread is, "
	"record_and_summarize samples CPU time for a few seconds (root needed), query runs SQL on "
	"recordings and on live tables.";

static int initialize(FILE *out, const char *id, const char *msg)
{
	char *asked = jq_text(msg, "$.params.protocolVersion");
	const char *v = versions[0];
	struct strbuf r = {0};
	size_t i;
	int err;

	for (i = 0; asked && i < ARRAY_SIZE(versions); i++)
		if (!strcmp(asked, versions[i]))
			v = versions[i];
	free(asked);
	err = sb_printf(&r,
			"{\"protocolVersion\":\"%s\",\"capabilities\":{\"tools\":{\"listChanged\":"
			"false}},\"serverInfo\":{\"name\":\"probing\",\"title\":\"probing: "
			"Python/AI profiler and live diagnosis\",\"version\":\"%s\"},"
			"\"instructions\":",
			v, PROBING_VERSION);
	err = err ?: json_string(&r, instructions, strlen(instructions));
	err = err ?: sb_puts(&r, "}");
	err = err ?: send_result(out, id, sb_str(&r));
	sb_free(&r);
	return err;
}

static int tools_list(FILE *out, const char *id)
{
	struct strbuf r = {0};
	int err;

	err = sb_puts(&r, "{\"tools\":");
	err = err ?: tools__list(&r);
	err = err ?: sb_puts(&r, "}");
	err = err ?: send_result(out, id, sb_str(&r));
	sb_free(&r);
	return err;
}

#define PROGRESS_MS 5000 /* between the progress notifications of a long call */

/* The progress notifications of one tools/call whose request has a progressToken. */
struct progress {
	FILE *out;
	const char *token; /* JSON text, as the request had it */
	const char *name;  /* the tool */
	uint64_t t0;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* signalled when done is set */
	bool done;
};

/*
 * Every PROGRESS_MS until the call is done, notifications/progress with the seconds it has
 * run as progress (MCP, "Progress"): a client that resets its request timeout on progress
 * (the TypeScript SDK's resetTimeoutOnProgress) then waits for a call of minutes.
 */
static void *progress_thread(void *arg)
{
	struct progress *p = arg;
	struct timespec at;
	struct strbuf m = {0};
	double secs;

	clock_gettime(CLOCK_MONOTONIC, &at);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		at.tv_sec += PROGRESS_MS / 1000;
		while (!p->done && pthread_cond_timedwait(&p->cond, &p->lock, &at) != ETIMEDOUT)
			;
		if (p->done)
			break;
		secs = (now_mono_ns() - p->t0) / 1e9;
		sb_reset(&m);
		if (!sb_printf(&m,
			       "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\","
			       "\"params\":{\"progressToken\":%s,\"progress\":%.0f,"
			       "\"message\":\"%s: running for %.0f s\"}}",
			       p->token, secs, p->name, secs) &&
		    send_line(p->out, &m))
			out_failed = 1;
	}
	pthread_mutex_unlock(&p->lock);
	sb_free(&m);
	return NULL;
}

/* Run the tools/call @msg and answer it, unless @call is cancelled meanwhile. */
static int tools_call(FILE *out, const char *id, const char *msg, struct tool_call *call)
{
	const char *type = jq_type(msg, "$.params.name");
	struct strbuf text = {0}, r = {0};
	char *name = NULL, *args = NULL, *token = NULL;
	struct progress prog;
	pthread_t ticker;
	bool is_error = false, ticking = false;
	uint64_t t0 = now_mono_ns();
	int err, rc;

	if (!type || strcmp(type, "text"))
		return send_error(out, id, INVALID_PARAMS,
				  "tools/call needs params.name, a string");
	name = jq_text(msg, "$.params.name");
	type = jq_type(msg, "$.params.arguments");
	if (type && strcmp(type, "null"))
		args = jq_json(msg, "$.params.arguments");
	if (!name || (type && strcmp(type, "null") && !args)) {
		err = send_error(out, id, INTERNAL_ERROR, "out of memory");
		goto cleanup;
	}
	/* A name that is not a tool's is never sent back (tools__call refuses it first). */
	token = strcmp(jq_type(msg, "$.params._meta.progressToken") ?: "", "text") &&
				strcmp(jq_type(msg, "$.params._meta.progressToken") ?: "",
				       "integer")
			? NULL
			: jq_json(msg, "$.params._meta.progressToken");
	if (token && tools__offered(name)) {
		pthread_condattr_t ca;

		prog = (struct progress){.out = out, .token = token, .name = name, .t0 = t0};
		pthread_mutex_init(&prog.lock, NULL);
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&prog.cond, &ca);
		pthread_condattr_destroy(&ca);
		ticking = !pthread_create(&ticker, NULL, progress_thread, &prog);
	}
	rc = tools__call(name, args, call, &text, &is_error);
	if (ticking) {
		pthread_mutex_lock(&prog.lock);
		prog.done = true;
		pthread_cond_signal(&prog.cond);
		pthread_mutex_unlock(&prog.lock);
		pthread_join(ticker, NULL);
	}
	if (token && tools__offered(name)) {
		pthread_cond_destroy(&prog.cond);
		pthread_mutex_destroy(&prog.lock);
	}
	pr_info("mcp: %s -> %s%s (%.0f ms)", name,
		call->cancelled ? "cancelled"
		: rc == -ENOENT ? "unknown tool"
		: rc == -EINVAL ? "invalid arguments"
		: rc		? "failed"
				: "done",
		is_error ? " with an error" : "", (now_mono_ns() - t0) / 1e6);
	/* A cancelled request gets no answer (MCP, "Cancellation"). */
	if (call->cancelled) {
		err = 0;
		goto cleanup;
	}
	if (rc == -ENOENT || rc == -EINVAL) {
		err = send_error(out, id, INVALID_PARAMS, sb_str(&text));
		goto cleanup;
	}
	if (rc) {
		err = send_error(out, id, INTERNAL_ERROR, text.len ? sb_str(&text) : strerror(-rc));
		goto cleanup;
	}
	err = sb_puts(&r, "{\"content\":[{\"type\":\"text\",\"text\":");
	err = err ?: json_string(&r, sb_str(&text), text.len);
	err = err ?: sb_printf(&r, "}],\"isError\":%s}", is_error ? "true" : "false");
	err = err ?: send_result(out, id, sb_str(&r));
cleanup:
	free(name);
	free(args);
	free(token);
	sb_free(&text);
	sb_free(&r);
	return err;
}

static void *call_thread(void *arg)
{
	struct call_slot *s = arg;

	if (tools_call(s->out, s->id, s->msg, &s->call))
		out_failed = 1;
	pthread_mutex_lock(&calls_lock);
	s->done = true;
	pthread_mutex_unlock(&calls_lock);
	return NULL;
}

/* Join the thread of @s and free the slot. Only the reading thread calls it. */
static void reap(struct call_slot *s)
{
	pthread_join(s->thread, NULL);
	free(s->id);
	free(s->msg);
	memset(s, 0, sizeof(*s));
}

/*
 * Start a thread for the tools/call @msg (id @id), in a free slot; with none free, answer
 * that the server is busy. A request whose id is that of a call in progress is refused (a
 * cancellation could not tell them apart). Return 0, or -EIO when @out failed.
 */
static int start_call(FILE *out, const char *id, const char *msg)
{
	struct call_slot *free_slot = NULL;
	sigset_t block, old;
	bool same_id = false;
	int err;

	pthread_mutex_lock(&calls_lock);
	for (size_t i = 0; i < ARRAY_SIZE(slots); i++) {
		struct call_slot *s = &slots[i];

		if (s->busy && s->done) {
			pthread_mutex_unlock(&calls_lock);
			reap(s); /* its thread has ended: pthread_join returns at once */
			pthread_mutex_lock(&calls_lock);
		}
		if (s->busy && !strcmp(s->id, id))
			same_id = true;
		if (!s->busy && !free_slot)
			free_slot = s;
	}
	pthread_mutex_unlock(&calls_lock);
	if (same_id)
		return send_error(out, id, INVALID_REQUEST,
				  "a request with this id is still in progress: give each request "
				  "an id of its own");
	if (!free_slot) {
		char why[128];

		snprintf(why, sizeof(why),
			 "busy: %d tool calls are in progress; wait for one to answer, or cancel "
			 "one",
			 MCP_MAX_CALLS);
		return send_error(out, id, SERVER_BUSY, why);
	}
	free_slot->id = strdup(id);
	free_slot->msg = strdup(msg);
	free_slot->out = out;
	if (!free_slot->id || !free_slot->msg) {
		err = send_error(out, id, INTERNAL_ERROR, "out of memory");
		goto fail;
	}
	/* Signals for the server go to the reading thread, which they must wake. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	err = pthread_create(&free_slot->thread, NULL, call_thread, free_slot);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		err = send_error(out, id, INTERNAL_ERROR, "cannot start a thread for the call");
		goto fail;
	}
	pthread_mutex_lock(&calls_lock);
	free_slot->busy = true;
	pthread_mutex_unlock(&calls_lock);
	/* A signal that came before the slot was busy found nothing to cancel there. */
	if (stopping)
		tools__cancel(&free_slot->call);
	return 0;
fail:
	free(free_slot->id);
	free(free_slot->msg);
	memset(free_slot, 0, sizeof(*free_slot));
	return err;
}

/* notifications/cancelled: stop the call whose id is params.requestId, if it is in progress. */
static void cancel_call(const char *msg)
{
	char *id = jq_json(msg, "$.params.requestId");

	if (!id)
		return;
	pthread_mutex_lock(&calls_lock);
	for (size_t i = 0; i < ARRAY_SIZE(slots); i++)
		if (slots[i].busy && !slots[i].done && !strcmp(slots[i].id, id)) {
			tools__cancel(&slots[i].call);
			pr_info("mcp: request %s cancelled by the client", id);
		}
	pthread_mutex_unlock(&calls_lock);
	free(id);
}

/* Handle one message (a line). Return 0, or -EIO when @out failed. */
static int handle(FILE *out, const char *msg)
{
	const char *type = jq_type(msg, "$"), *idtype;
	char *id = NULL, *version = NULL, *method = NULL;
	int err = 0;

	if (!type)
		return send_error(out, NULL, PARSE_ERROR, "not valid JSON");
	if (!strcmp(type, "array"))
		return send_error(out, NULL, INVALID_REQUEST,
				  "batches are not supported: send one request per line");
	if (strcmp(type, "object"))
		return send_error(out, NULL, INVALID_REQUEST, "a request is a JSON object");
	idtype = jq_type(msg, "$.id");
	if (idtype) {
		if (strcmp(idtype, "text") && strcmp(idtype, "integer"))
			return send_error(out, NULL, INVALID_REQUEST,
					  "the id must be a string or an integer");
		id = jq_json(msg, "$.id");
		if (!id)
			return send_error(out, NULL, INTERNAL_ERROR, "out of memory");
	}
	version = jq_text(msg, "$.jsonrpc");
	method = jq_text(msg, "$.method");
	if (!version || strcmp(version, "2.0") || strcmp(jq_type(msg, "$.method") ?: "", "text")) {
		if (id)
			err = send_error(
				out, id, INVALID_REQUEST,
				"not a JSON-RPC 2.0 request: it needs \"jsonrpc\": \"2.0\" "
				"and a \"method\" string");
		goto cleanup;
	}
	/* A notification (no id) gets no answer: initialized, cancelled, progress... */
	if (!id) {
		if (!strcmp(method, "notifications/cancelled"))
			cancel_call(msg);
		goto cleanup;
	}
	if (!strcmp(method, "initialize"))
		err = initialize(out, id, msg);
	else if (!strcmp(method, "ping"))
		err = send_result(out, id, "{}");
	else if (!strcmp(method, "tools/list"))
		err = tools_list(out, id);
	else if (!strcmp(method, "tools/call"))
		err = start_call(out, id, msg);
	else
		err = send_error(out, id, METHOD_NOT_FOUND, "method not found");
cleanup:
	free(id);
	free(version);
	free(method);
	return err;
}

/*
 * Read one line of @in into @line (without its end), NUL bytes included: a NUL inside a line
 * neither ends it nor hides its newline, so it spoils that line only. Return 1, 0 at the end
 * of input, or -1 when it was longer than MCP_MAX_MESSAGE (the rest of it is skipped).
 */
static int read_line(FILE *in, struct strbuf *line)
{
	char buf[4096];
	bool too_long = false, any = false;
	size_t n = 0;
	int c = EOF;

	sb_reset(line);
	flockfile(in);
	while (!stopping && (c = getc_unlocked(in)) != EOF) {
		any = true;
		if (c == '\n')
			break;
		buf[n++] = (char)c;
		if (n < sizeof(buf))
			continue;
		if (!too_long && (line->len + n > MCP_MAX_MESSAGE || sb_append(line, buf, n)))
			too_long = true;
		n = 0;
	}
	funlockfile(in);
	if (n && !too_long && (line->len + n > MCP_MAX_MESSAGE || sb_append(line, buf, n)))
		too_long = true;
	if (!any || stopping)
		return 0;
	if (too_long)
		return -1;
	while (line->len && line->buf[line->len - 1] == '\r')
		line->buf[--line->len] = '\0';
	return 1;
}

/* Why the line @s (@n bytes) cannot be JSON text at all (RFC 8259: UTF-8), or NULL. */
static const char *not_json_text(const char *s, size_t n)
{
	if (memchr(s, '\0', n))
		return "not valid JSON: the line has a NUL byte";
	if (!utf8_valid(s, n))
		return "not valid JSON: the line is not valid UTF-8";
	return NULL;
}

int mcp__serve(FILE *in, FILE *out)
{
	struct strbuf line = {0};
	const char *why;
	int rc, err = 0;

	while (!err && !out_failed && (rc = read_line(in, &line)) != 0) {
		if (rc < 0) {
			err = send_error(out, NULL, INVALID_REQUEST, "message longer than 4 MiB");
			continue;
		}
		if (strspn(sb_str(&line), " \t") == line.len)
			continue;
		why = not_json_text(line.buf, line.len);
		err = why ? send_error(out, NULL, PARSE_ERROR, why) : handle(out, sb_str(&line));
	}
	sb_free(&line);
	/*
	 * The input has ended (a script that sent its requests and closed): the calls in
	 * progress end and answer, each within its time limit. Stopped by a signal or unable
	 * to write: they are cancelled.
	 */
	if (err || out_failed)
		mcp__stop();
	for (size_t i = 0; i < ARRAY_SIZE(slots); i++) {
		pthread_mutex_lock(&calls_lock);
		bool busy = slots[i].busy;

		pthread_mutex_unlock(&calls_lock);
		if (busy)
			reap(&slots[i]);
	}
	return err ?: out_failed ? -EIO : 0;
}
