/* SPDX-License-Identifier: MIT */
/*
 * mcp: a Model Context Protocol server on stdio — JSON-RPC 2.0 messages, one per line, read
 * from one stream and answered on another (https://modelcontextprotocol.io, "stdio"
 * transport): initialize, ping, tools/list, tools/call (tools.h), notifications/cancelled;
 * other notifications ignored.
 * Messages are read with SQLite's JSON functions (base/jsonq.h) and written with the escapers
 * of base/escape.h; the output stream carries protocol messages only, diagnostics go to
 * stderr.
 */
#ifndef PROBING_MCP_H
#define PROBING_MCP_H

#include <stdio.h>

#define MCP_MAX_MESSAGE (4u << 20) /* a longer line is answered with an error and skipped */

#define MCP_MAX_CALLS 4 /* tools/call requests in progress at once; more are refused (busy) */

/*
 * Serve the messages of @in until it ends, answering on @out. Each tools/call runs in a thread
 * of its own, so that answers may come in another order than the requests (matched by id);
 * notifications/cancelled stops one (it gets no answer). At the end of @in, wait for the
 * calls in progress to answer. Return 0 at the end of @in, or -EIO when @out cannot be
 * written.
 */
int mcp__serve(FILE *in, FILE *out);

/*
 * End mcp__serve: the tool calls in progress are cancelled (their commands stopped) and no
 * further message is read. Async-signal-safe (for SIGTERM from the client).
 */
void mcp__stop(void);

#endif
