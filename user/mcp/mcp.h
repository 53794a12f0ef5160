/* SPDX-License-Identifier: MIT */
/*
 * mcp: a Model Context Protocol server on stdio — JSON-RPC 2.0 messages, one per line, read
 * from one stream and answered on another (https://modelcontextprotocol.io, "stdio"
 * transport): initialize, ping, tools/list, tools/call (tools.h), notifications ignored.
 * Messages are read with SQLite's JSON functions (base/jsonq.h) and written with the escapers
 * of base/escape.h; the output stream carries protocol messages only, diagnostics go to
 * stderr.
 */
#ifndef PROBING_MCP_H
#define PROBING_MCP_H

#include <stdio.h>

#define MCP_MAX_MESSAGE (4u << 20) /* a longer line is answered with an error and skipped */

/*
 * Serve the messages of @in until it ends, answering on @out. Requests are handled one at a
 * time, in order. Return 0 at the end of @in, or -EIO when @out cannot be written.
 */
int mcp__serve(FILE *in, FILE *out);

/*
 * End mcp__serve: the tool running, if any, is stopped and no further message is read.
 * Async-signal-safe (for SIGTERM from the client).
 */
void mcp__stop(void);

#endif
