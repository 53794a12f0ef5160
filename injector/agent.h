/* SPDX-License-Identifier: MIT */
/*
 * The wire protocol between probing (user/live/agent_client.c) and the in-process agent
 * (injector/agent.c), shared by both sides.
 *
 * Transport: the abstract Unix socket "@probing-<pid>" (pid as the target sees itself), peer
 * credentials checked (the target's uid or root); optionally TCP, where the first frame must
 * be "auth" with the token, within 2 s and in at most 128 bytes (docs/live.md, "Security
 * model").
 *
 * Frame: u32 little-endian length L (of what follows), one type byte, L - 1 payload bytes.
 *   client -> agent
 *     'Q'  request: KIND '\0' BODY (BODY is JSON for the Python kinds)
 *     'C'  cancel the request in progress (raises KeyboardInterrupt in it)
 *   agent -> client
 *     'G'  the agent holds the GIL and starts the request (Python kinds only)
 *     'R'  result: a JSON object
 *     'X'  the request failed in the agent's Python dispatcher: JSON {"error", "traceback"}
 *     'E'  agent-level error (no Python, not initialized, denied, bad frame): text
 *
 * Kinds answered by the C side, without the GIL: "hello" (status, works even when the GIL
 * never comes), "auth" (TCP token), "listen" (BODY: ADDR, injector/hostport.h; start serving
 * TCP, or report the address already served: {"listen", "token", "already"}) and "token"
 * (the address and token of the TCP port served), the last two on the Unix socket only.
 * Every other kind goes to the Python dispatcher (injector/py/agent.py).
 */
#ifndef PROBING_AGENT_H
#define PROBING_AGENT_H

#define AGENT_VERSION	  "0.1.0"
#define AGENT_SOCK_PREFIX "probing-"	     /* abstract name: "\0probing-<pid>" */
#define AGENT_LIB_PREFIX  "libprobing-agent" /* basename prefix of the agent (and its copies) */
#define AGENT_START_SYM	  "probing_agent_start"
#define AGENT_MAX_FRAME	  (64u << 20)
/* How the 'E' answer to "auth" begins when the peer's address made too many failed attempts
 * lately: then the token is not even compared. */
#define AGENT_AUTH_THROTTLED "too many failed authentications"

#define FRAME_REQUEST 'Q'
#define FRAME_CANCEL  'C'
#define FRAME_GIL     'G'
#define FRAME_RESULT  'R'
#define FRAME_PYERROR 'X'
#define FRAME_ERROR   'E'

#endif
