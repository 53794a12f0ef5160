/* SPDX-License-Identifier: MIT */
/*
 * http: the web server of `probing serve`, on libmicrohttpd — listening (connections reach
 * libmicrohttpd through gate.h only once their request shows the token), one thread per
 * connection, the per-run token every request must carry, request bodies and responses with
 * the security headers. What each URL does is api.c's (http_handler); this module knows no
 * URL but "/" (where the token arrives) and checks nothing but the token.
 *
 * The token: 128 random bits (getrandom), printed in the URL; a request carries it as
 * ?token=..., as "Authorization: Bearer ..." or in the cookie the first page load sets
 * (HttpOnly, SameSite=Strict, named after the port). Every request without a valid token —
 * on loopback too — is answered 401 before its body is read or anything is done.
 */
#ifndef PROBING_HTTP_H
#define PROBING_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "base/util.h"

#define HTTP_MAX_BODY (1u << 20) /* request bodies (SQL) up to 1 MiB */

struct http_req {
	const char *method; /* "GET" or "POST" (others are refused before the handler) */
	const char *path;   /* the URL's path, without the query string */
	struct strbuf body; /* the request body, NUL-terminated */
	int fd;		    /* the client's socket: watched for a hang-up while a command runs */
	void *conn;	    /* the libmicrohttpd connection */
};

struct http_resp {
	int status;	       /* 200 unless set */
	const char *type;      /* Content-Type; NULL: "application/json" */
	struct strbuf body;    /* the body */
	const char *csp;       /* Content-Security-Policy; NULL: the pages' (http.c) */
	bool frame_ok;	       /* may be shown in a frame of our own pages (the flame graph) */
	char disposition[256]; /* Content-Disposition, or "" */
};

/* The value of query argument @name of @req, or NULL. */
const char *http_arg(const struct http_req *req, const char *name);

/*
 * Check that every query argument of @req is one of @allowed (NULL-terminated; "token" is
 * always allowed). Return NULL, or the name of the first other one.
 */
const char *http_unknown_arg(const struct http_req *req, const char *const *allowed);

/* Handle an authenticated request: fill @resp. Runs on the connection's own thread. */
typedef void (*http_handler)(struct http_req *req, struct http_resp *resp);

struct http_server;

/*
 * Listen on @listen (hostport.h: PORT, HOST:PORT, [IPV6]:PORT; port 0 = any free port) and
 * serve with @handler on threads of its own. On success store the server in *@out and the URL
 * to open, with the token, in @url ("http://127.0.0.1:PORT/?token=..."); return 0. On failure
 * print what, why and what to do (a port that is taken, a host that does not resolve) and
 * return -errno.
 */
int http__start(const char *listen, http_handler handler, struct http_server **out, char *url,
		size_t url_size);

/* true if the server listens on a loopback address only. */
bool http__loopback(const struct http_server *s);

/* Stop listening, wait for the requests in progress, free. NULL is a no-op. */
void http__stop(struct http_server *s);

#endif
