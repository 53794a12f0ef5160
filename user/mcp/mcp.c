// SPDX-License-Identifier: MIT
/* mcp: JSON-RPC 2.0 over stdio for the Model Context Protocol. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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

static volatile sig_atomic_t stopping;

void mcp__stop(void)
{
	stopping = 1;
	tools__stop();
}

/* The protocol versions spoken, newest first: a client's is answered in kind if listed. */
static const char *const versions[] = {"2025-06-18", "2025-03-26", "2024-11-05"};

static int send_line(FILE *out, const struct strbuf *msg)
{
	if (fwrite(sb_str(msg), 1, msg->len, out) != msg->len || fputc('\n', out) == EOF ||
	    fflush(out))
		return -EIO;
	return 0;
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

static int tools_call(FILE *out, const char *id, const char *msg)
{
	const char *type = jq_type(msg, "$.params.name");
	struct strbuf text = {0}, r = {0};
	char *name = NULL, *args = NULL;
	bool is_error = false;
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
	rc = tools__call(name, args, &text, &is_error);
	pr_info("mcp: %s -> %s%s (%.0f ms)", name,
		rc == -ENOENT	? "unknown tool"
		: rc == -EINVAL ? "invalid arguments"
		: rc		? "failed"
				: "done",
		is_error ? " with an error" : "", (now_mono_ns() - t0) / 1e6);
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
	sb_free(&text);
	sb_free(&r);
	return err;
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
	if (!id)
		goto cleanup;
	if (!strcmp(method, "initialize"))
		err = initialize(out, id, msg);
	else if (!strcmp(method, "ping"))
		err = send_result(out, id, "{}");
	else if (!strcmp(method, "tools/list"))
		err = tools_list(out, id);
	else if (!strcmp(method, "tools/call"))
		err = tools_call(out, id, msg);
	else
		err = send_error(out, id, METHOD_NOT_FOUND, "method not found");
cleanup:
	free(id);
	free(version);
	free(method);
	return err;
}

/*
 * Read one line of @in into @line (without its end). Return 1, 0 at the end of input, or -1
 * when it was longer than MCP_MAX_MESSAGE (the rest of it is skipped).
 */
static int read_line(FILE *in, struct strbuf *line)
{
	char buf[65536];
	bool too_long = false, any = false;
	size_t n;

	sb_reset(line);
	while (!stopping && fgets(buf, sizeof(buf), in)) {
		any = true;
		n = strlen(buf);
		if (!too_long && line->len + n > MCP_MAX_MESSAGE)
			too_long = true;
		if (!too_long && sb_append(line, buf, n))
			too_long = true;
		if (n && buf[n - 1] == '\n')
			break;
	}
	if (!any || stopping)
		return 0;
	if (too_long)
		return -1;
	while (line->len && (line->buf[line->len - 1] == '\n' || line->buf[line->len - 1] == '\r'))
		line->buf[--line->len] = '\0';
	return 1;
}

int mcp__serve(FILE *in, FILE *out)
{
	struct strbuf line = {0};
	int rc, err = 0;

	while (!err && (rc = read_line(in, &line)) != 0) {
		if (rc < 0) {
			err = send_error(out, NULL, INVALID_REQUEST, "message longer than 4 MiB");
			continue;
		}
		if (strspn(sb_str(&line), " \t") == line.len)
			continue;
		err = handle(out, sb_str(&line));
	}
	sb_free(&line);
	return err;
}
