// SPDX-License-Identifier: MIT
/* http: libmicrohttpd set up for `probing serve`: the listening socket, the token, responses. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <microhttpd.h>

#include "base/log.h"
#include "injector/hostport.h"
#include "serve/gate.h"
#include "serve/http.h"

#define TOKEN_BYTES 16

/* The pages' policy: our own script and style only, no frame of us elsewhere. */
static const char page_csp[] = "default-src 'self'; script-src 'self'; style-src 'self'; "
			       "img-src 'self' data:; frame-src 'self'; connect-src 'self'; "
			       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

struct http_server {
	struct MHD_Daemon *d;
	http_handler handler;
	char token[2 * TOKEN_BYTES + 1];
	char cookie[40]; /* the cookie's name: probing_token_PORT */
	bool loopback;
	int fd;
	struct gate *gate; /* accepts, and hands on the connections that show the token */
};

/* Per request, from its first call (headers) to its completion. */
struct req_state {
	struct http_req req;
	bool too_large;
};

/* ---- the token ------------------------------------------------------------------------------ */

static int make_token(char *out)
{
	unsigned char raw[TOKEN_BYTES];
	ssize_t n;
	int i;

	n = getrandom(raw, sizeof(raw), 0);
	if (n != (ssize_t)sizeof(raw))
		return n < 0 ? -errno : -EIO;
	for (i = 0; i < TOKEN_BYTES; i++)
		sprintf(out + 2 * i, "%02x", raw[i]);
	return 0;
}

/*
 * Compare @given (@n bytes, NULs included: "?token=T%00" is not T) with the token, in time
 * that does not depend on where they differ.
 */
static bool token_ok(const struct http_server *s, const char *given, size_t n)
{
	size_t len = sizeof(s->token) - 1, i;
	unsigned char diff = 0;

	if (!given || n != len)
		return false;
	for (i = 0; i < len; i++)
		diff |= (unsigned char)given[i] ^ (unsigned char)s->token[i];
	return diff == 0;
}

/*
 * Does the request head @head (@n bytes) carry the token? Each run of exactly as many hex
 * digits as the token, between other characters, is compared with it: the token stands
 * so in every place given_token reads (?token=T&, "Bearer T", "name=T;"). The web server
 * then checks it exactly; this only keeps who has not shown it out of there.
 */
static bool head_has_token(void *ctx, const char *head, size_t n)
{
	const struct http_server *s = ctx;
	size_t len = sizeof(s->token) - 1, i = 0, start;
	bool found = false;

	while (i < n) {
		if (!isxdigit((unsigned char)head[i])) {
			i++;
			continue;
		}
		start = i;
		while (i < n && isxdigit((unsigned char)head[i]))
			i++;
		if (i - start == len)
			found |= token_ok(s, head + start, len);
	}
	return found;
}

static void pass_connection(void *ctx, int fd, const struct sockaddr *sa, socklen_t len)
{
	struct http_server *s = ctx;

	/* On failure (its connection limit) libmicrohttpd closes the socket itself. */
	if (MHD_add_connection(s->d, fd, sa, len) != MHD_YES)
		pr_info("serve: a connection with the token dropped: %s", strerror(errno));
}

static const char refusal[] = "probing serve: this server needs the token of its URL: open the "
			      "URL it printed (http://HOST:PORT/?token=...)\n";

static const struct gate_ops gate_ops = {
	.has_token = head_has_token,
	.pass = pass_connection,
	.refusal = refusal,
};

/* ---- requests ------------------------------------------------------------------------------- */

const char *http_arg(const struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

struct arg_check {
	const char *const *allowed;
	const char *unknown;
};

static enum MHD_Result check_arg(void *cls, enum MHD_ValueKind kind, const char *key,
				 const char *value)
{
	struct arg_check *c = cls;
	const char *const *a;

	if (!strcmp(key, "token"))
		return MHD_YES;
	for (a = c->allowed; *a; a++)
		if (!strcmp(key, *a))
			return MHD_YES;
	c->unknown = key;
	return MHD_NO;
}

const char *http_unknown_arg(const struct http_req *req, const char *const *allowed)
{
	struct arg_check c = {.allowed = allowed};

	MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, check_arg, &c);
	return c.unknown;
}

/* ---- responses ------------------------------------------------------------------------------ */

static enum MHD_Result send_response(struct MHD_Connection *c, const struct http_resp *r,
				     const char *cookie, const char *location)
{
	struct MHD_Response *m;
	enum MHD_Result ret;

	m = MHD_create_response_from_buffer(r->body.len, r->body.buf ? r->body.buf : "",
					    MHD_RESPMEM_MUST_COPY);
	if (!m)
		return MHD_NO;
	MHD_add_response_header(m, "Content-Type", r->type ? r->type : "application/json");
	MHD_add_response_header(m, "Cache-Control", "no-store");
	MHD_add_response_header(m, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(m, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(m, "X-Frame-Options", r->frame_ok ? "SAMEORIGIN" : "DENY");
	MHD_add_response_header(m, "Content-Security-Policy", r->csp ? r->csp : page_csp);
	if (r->disposition[0])
		MHD_add_response_header(m, "Content-Disposition", r->disposition);
	if (cookie)
		MHD_add_response_header(m, "Set-Cookie", cookie);
	if (location)
		MHD_add_response_header(m, "Location", location);
	ret = MHD_queue_response(c, r->status ? r->status : 200, m);
	MHD_destroy_response(m);
	return ret;
}

/* A short plain-text answer (refusals before the handler). */
static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *text)
{
	struct http_resp r = {.status = status, .type = "text/plain; charset=utf-8"};
	enum MHD_Result ret;

	if (sb_puts(&r.body, text))
		return MHD_NO;
	ret = send_response(c, &r, NULL, NULL);
	sb_free(&r.body);
	return ret;
}

/*
 * The token the request carries, and its length in *@n (a value may hold NULs, which end no
 * token): ?token=, Authorization: Bearer (the scheme in any case, RFC 7235 2.1), or our
 * cookie.
 */
static const char *given_token(struct http_server *s, struct MHD_Connection *c, bool *in_url,
			       size_t *n)
{
	const char *t = NULL, *auth = NULL;
	size_t alen = 0;

	*n = 0;
	*in_url = MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, "token", 5, &t, n) ==
		  MHD_YES;
	if (*in_url)
		return t;
	if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION,
					  strlen(MHD_HTTP_HEADER_AUTHORIZATION), &auth,
					  &alen) == MHD_YES &&
	    alen > 7 && !strncasecmp(auth, "Bearer ", 7)) {
		*n = alen - 7;
		return auth + 7;
	}
	if (MHD_lookup_connection_value_n(c, MHD_COOKIE_KIND, s->cookie, strlen(s->cookie), &t,
					  n) == MHD_YES)
		return t;
	*n = 0;
	return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct http_server *s = cls;
	struct req_state *st = *con_cls;
	struct http_resp resp = {0};
	const union MHD_ConnectionInfo *ci;
	enum MHD_Result ret;
	bool in_url;
	size_t tlen;

	if (!st) {
		/* Headers only so far: refuse what is not ours before reading a byte more. */
		const char *given = given_token(s, c, &in_url, &tlen);

		if (!token_ok(s, given, tlen)) {
			pr_info("serve: %s %s refused: no valid token", method, url);
			return send_text(c, 401, refusal);
		}
		if (strcmp(method, "GET") && strcmp(method, "POST"))
			return send_text(c, 405, "probing serve: only GET and POST are served\n");
		if (in_url && !strcmp(method, "GET") && !strcmp(url, "/")) {
			/* Keep the token out of the address bar and history: a cookie from now on. */
			char cookie[128];

			snprintf(cookie, sizeof(cookie), "%s=%s; HttpOnly; SameSite=Strict; Path=/",
				 s->cookie, s->token);
			resp.status = 303;
			resp.type = "text/plain; charset=utf-8";
			return send_response(c, &resp, cookie, "/");
		}
		st = calloc(1, sizeof(*st));
		if (!st)
			return MHD_NO;
		st->req.method = !strcmp(method, "GET") ? "GET" : "POST";
		st->req.path = url;
		st->req.conn = c;
		ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		st->req.fd = ci ? ci->connect_fd : -1;
		*con_cls = st;
		return MHD_YES;
	}
	if (*upload_size) {
		if (st->req.body.len + *upload_size > HTTP_MAX_BODY)
			st->too_large = true;
		else if (sb_append(&st->req.body, upload, *upload_size))
			return MHD_NO;
		*upload_size = 0;
		return MHD_YES;
	}
	if (st->too_large)
		return send_text(c, 413, "probing serve: the request body is larger than 1 MiB\n");
	s->handler(&st->req, &resp);
	ret = send_response(c, &resp, NULL, NULL);
	pr_info("serve: %s %s -> %d", method, url, resp.status ? resp.status : 200);
	sb_free(&resp.body);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct req_state *st = *con_cls;

	if (!st)
		return;
	sb_free(&st->req.body);
	free(st);
	*con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char buf[512];

	vsnprintf(buf, sizeof(buf), fmt, ap);
	pr_info("serve: libmicrohttpd: %s", buf);
}

/* ---- listening ------------------------------------------------------------------------------ */

static bool is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

/* Bind and listen on @host:@port; the socket, or -errno with the reason printed. */
static int listen_on(const char *host, unsigned int port, const char *spec,
		     struct sockaddr_storage *bound)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV | AI_PASSIVE | AI_ADDRCONFIG},
			*res = NULL;
	socklen_t len = sizeof(*bound);
	char portstr[8];
	int fd, rc, one = 1, err;

	snprintf(portstr, sizeof(portstr), "%u", port);
	rc = getaddrinfo(host, portstr, &hints, &res);
	if (rc == EAI_ADDRFAMILY || rc == EAI_NONAME) {
		hints.ai_flags &= ~AI_ADDRCONFIG; /* loopback-only machines: ::1 still works */
		rc = getaddrinfo(host, portstr, &hints, &res);
	}
	if (rc) {
		pr_warn("cannot listen on %s: the host '%s' does not resolve (%s); give an address "
			"of this machine, e.g. --listen 127.0.0.1:8080",
			spec, host, gai_strerror(rc));
		return -EINVAL;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		err = -errno;
		pr_warn("cannot listen on %s: %s", spec, strerror(-err));
		goto cleanup;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (res->ai_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 64)) {
		err = -errno;
		if (err == -EADDRINUSE)
			pr_warn("cannot listen on %s: the port is taken (another program listens "
				"there); choose another port, or give port 0 for any free one "
				"(--listen %s:0)",
				spec, res->ai_family == AF_INET6 ? "[::1]" : host);
		else if (err == -EACCES)
			pr_warn("cannot listen on %s: ports below 1024 need root (or "
				"CAP_NET_BIND_SERVICE); choose a port from 1024 up",
				spec);
		else if (err == -EADDRNOTAVAIL)
			pr_warn("cannot listen on %s: that address is not one of this machine's",
				spec);
		else
			pr_warn("cannot listen on %s: %s", spec, strerror(-err));
		close(fd);
		goto cleanup;
	}
	if (getsockname(fd, (struct sockaddr *)bound, &len)) {
		err = -errno;
		close(fd);
		goto cleanup;
	}
	err = fd;
cleanup:
	freeaddrinfo(res);
	return err;
}

int http__start(const char *listen, http_handler handler, struct http_server **out, char *url,
		size_t url_size)
{
	char host[256], msg[256], shown[INET6_ADDRSTRLEN + 2];
	struct sockaddr_storage bound;
	struct http_server *s;
	unsigned int port;
	int err, flags;

	if (hostport_parse(listen, false, true, host, sizeof(host), &port, msg, sizeof(msg))) {
		pr_warn("invalid --listen: %s", msg);
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->handler = handler;
	err = make_token(s->token);
	if (err) {
		pr_warn("cannot make the server's token: %s", strerror(-err));
		free(s);
		return err;
	}
	s->fd = listen_on(*host ? host : HOSTPORT_DEFAULT_HOST, port, listen, &bound);
	if (s->fd < 0) {
		err = s->fd;
		free(s);
		return err;
	}
	s->loopback = is_loopback((struct sockaddr *)&bound);
	if (bound.ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&bound;

		port = ntohs(a->sin6_port);
		shown[0] = '[';
		inet_ntop(AF_INET6, &a->sin6_addr, shown + 1, sizeof(shown) - 2);
		strcat(shown, "]");
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&bound;

		port = ntohs(a->sin_port);
		inet_ntop(AF_INET, &a->sin_addr, shown, sizeof(shown));
	}
	snprintf(s->cookie, sizeof(s->cookie), "probing_token_%u", port);
	/* An address that listens everywhere is opened by the machine's name. */
	if (!strcmp(shown, "0.0.0.0") || !strcmp(shown, "[::]")) {
		if (gethostname(host, sizeof(host) - 1))
			snprintf(host, sizeof(host), "localhost");
		host[sizeof(host) - 1] = '\0';
		snprintf(url, url_size, "http://%s:%u/?token=%s", host, port, s->token);
	} else {
		snprintf(url, url_size, "http://%s:%u/?token=%s", shown, port, s->token);
	}
	/* The gate accepts; libmicrohttpd gets only the connections that showed the token. */
	flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
		MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
	if (bound.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED,
				on_completed, s, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)64,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)60,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 << 10),
				MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
	if (!s->d) {
		pr_warn("cannot start the web server (libmicrohttpd) on %s", listen);
		close(s->fd);
		free(s);
		return -EIO;
	}
	err = gate__start(s->fd, &gate_ops, s, &s->gate);
	if (err) {
		pr_warn("cannot start the web server on %s: %s", listen, strerror(-err));
		MHD_stop_daemon(s->d);
		close(s->fd);
		free(s);
		return err;
	}
	*out = s;
	return 0;
}

bool http__loopback(const struct http_server *s)
{
	return s->loopback;
}

void http__stop(struct http_server *s)
{
	if (!s)
		return;
	gate__stop(s->gate);
	MHD_stop_daemon(s->d);
	close(s->fd);
	free(s);
}
