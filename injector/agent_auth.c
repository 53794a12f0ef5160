// SPDX-License-Identifier: MIT
/*
 * agent_auth: who may talk to the agent, and how much they may send (docs/live.md, "Security
 * model"). Its access checks and per-client limits are all here:
 *  - Unix socket: the peer's credentials (SO_PEERCRED): the target's own user or root is the
 *    owner; anyone else is told no and closed, in a few DENIED slots;
 *  - TCP: a peer must send "auth" with the token (compared in constant time) first, within
 *    AUTH_TIMEOUT_S and in at most PREAUTH_MAX bytes, in a few PREAUTH slots;
 *  - failed authentications are limited per source address (FAIL_BURST, FAIL_RATE);
 *  - each kind of peer has its own slots, and each client a bounded buffer (buf_limit).
 * Called on the agent (I/O) thread only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "agent.h"
#include "agent_int.h"

/*
 * Who may hold a connection, and how many (docs/live.md, "Security model"). Each kind of
 * peer has its own slots, so that nobody who cannot authenticate ever takes a place the
 * owner needs: peers that are not the owner over the Unix socket, and TCP peers that have not
 * given the token, only ever use DENIED and PREAUTH slots, which are few, short-lived and
 * hold a few bytes.
 */
#define OWNER_SLOTS   32 /* Unix peers with the target's uid or root */
#define TCP_SLOTS     16 /* TCP peers that gave the token */
#define PREAUTH_SLOTS 8	 /* TCP peers that have not authenticated yet (the oldest is evicted) */
#define DENIED_SLOTS  8	 /* other users' Unix peers, told why, closed within DENIED_LINGER_S */
_Static_assert(OWNER_SLOTS + TCP_SLOTS + PREAUTH_SLOTS + DENIED_SLOTS == MAX_CLIENTS,
	       "agent_int.h's MAX_CLIENTS is the sum of the slots");

#define AUTH_TIMEOUT_S	2.0 /* a TCP peer must have authenticated this soon after connecting */
#define DENIED_LINGER_S 1.0 /* a refused peer's time to read why before it is closed */
/* A TCP peer's whole input before it has authenticated: one "auth" frame with the token. */
#define PREAUTH_MAX 128

/* Failed authentications (wrong token, garbage, time-out) per source address (IPv4, or
 * IPv6 /64): FAIL_BURST at once, then one per 1/FAIL_RATE seconds. FAIL_ADDRS addresses are
 * remembered; an address that has failed nothing lately takes no room. */
#define FAIL_BURST 5.0
#define FAIL_RATE  0.5
#define FAIL_ADDRS 64

/* Recent failed authentications of one source address (see FAIL_BURST). */
struct auth_fails {
	bool used;
	unsigned char addr[16];
	double credit; /* failures it may still make now, refilled at FAIL_RATE */
	double at;     /* when credit was computed */
};

static struct auth_fails fails[FAIL_ADDRS];
static char token[33]; /* the TCP token, 32 hex digits ("" when TCP is not served) */

static int count_clients(enum client_state st)
{
	int i, n = 0;

	for (i = 0; i < MAX_CLIENTS; i++)
		n += ag.clients[i].state == st;
	return n;
}

static int free_slot(void)
{
	int i;

	for (i = 0; i < MAX_CLIENTS; i++)
		if (ag.clients[i].state == CL_FREE)
			return i;
	return -1;
}

/* Who the failure limit counts: an IPv4 address (as ::ffff:a.b.c.d), or an IPv6 /64 (one
 * host usually has a whole /64). */
static void addr_key(const struct sockaddr_storage *ss, unsigned char key[16])
{
	memset(key, 0, 16);
	if (ss->ss_family == AF_INET) {
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;

		memcpy(key, a->s6_addr, IN6_IS_ADDR_V4MAPPED(a) ? 16 : 8);
	}
}

static void fails_refill(struct auth_fails *f, double now)
{
	f->credit += (now - f->at) * FAIL_RATE;
	f->at = now;
	if (f->credit >= FAIL_BURST)
		f->used = false; /* back to a clean slate: nothing to remember */
}

/* The failure record of @key, refilled up to @now; NULL when it has nothing to remember. */
static struct auth_fails *fails_of(const unsigned char key[16], double now)
{
	int i;

	for (i = 0; i < FAIL_ADDRS; i++) {
		struct auth_fails *f = &fails[i];

		if (!f->used || memcmp(f->addr, key, 16))
			continue;
		fails_refill(f, now);
		return f->used ? f : NULL;
	}
	return NULL;
}

/* Seconds before @key may try to authenticate again (0: now). */
static double auth_wait(const unsigned char key[16], double now)
{
	struct auth_fails *f = fails_of(key, now);

	return !f || f->credit >= 1 ? 0 : (1 - f->credit) / FAIL_RATE;
}

/* Count one failed authentication of @key. */
static void auth_failed(const unsigned char key[16], double now)
{
	struct auth_fails *f = fails_of(key, now), *g;
	int i;

	if (!f) {
		/* A free record, else the one closest to a clean slate. */
		for (i = 0; i < FAIL_ADDRS; i++) {
			g = &fails[i];
			if (g->used)
				fails_refill(g, now);
			if (!g->used) {
				f = g;
				break;
			}
			if (!f || g->credit > f->credit)
				f = g;
		}
		*f = (struct auth_fails){.used = true, .credit = FAIL_BURST, .at = now};
		memcpy(f->addr, key, 16);
	}
	f->credit -= 1;
}

/* Is @given (@glen bytes) the token? In constant time: every byte of the token's buffer is
 * compared, with no early exit, whatever was given. */
static bool token_ok(const char *given, size_t glen)
{
	size_t i, n = strlen(token);
	unsigned char diff = glen != n;

	for (i = 0; i < sizeof(token) - 1; i++)
		diff |= (unsigned char)token[i] ^ (unsigned char)(i < glen ? given[i] : 0);
	return n && !diff;
}

/* Refuse pre-auth client @i (its failure counted); false: drop it. */
bool auth_refused(int i)
{
	struct client *c = &ag.clients[i];

	auth_failed(c->addr, mono_time());
	send_text(c->fd, FRAME_ERROR, "authentication failed: a valid token is required");
	return false;
}

/* Owner and token holders: blocking sends, bounded by a time-out so that a client that stops
 * reading cannot hold the agent for ever. */
static void set_trusted_io(int fd)
{
	struct timeval tv = {10, 0};
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* The first frame of TCP client @i, "auth" + the token (@p, @n bytes: KIND '\0' TOKEN).
 * Return false to drop it. */
bool authenticate(int i, const char *p, size_t n)
{
	struct client *c = &ag.clients[i];
	double now = mono_time(), wait = auth_wait(c->addr, now);
	size_t klen = strnlen(p, n);

	if (wait > 0) {
		/* Not even compared: guessing goes no faster than FAIL_RATE. */
		send_text(c->fd, FRAME_ERROR, "%s from this address: try again in %d s",
			  AGENT_AUTH_THROTTLED, (int)wait + 1);
		return false;
	}
	if (klen == n || strcmp(p, "auth") || !token_ok(p + klen + 1, n - klen - 1))
		return auth_refused(i);
	if (count_clients(CL_TCP) >= TCP_SLOTS) {
		send_text(c->fd, FRAME_ERROR, "too many clients: %d TCP connections are open",
			  TCP_SLOTS);
		return false;
	}
	c->state = CL_TCP;
	set_trusted_io(c->fd);
	return !send_text(c->fd, FRAME_RESULT, "{\"ok\": true}");
}

/*
 * How many bytes client @c may have buffered: a pre-auth client its auth frame at most;
 * others BUF_MIN, or the whole frame at the head of the buffer when it is bigger (up to
 * AGENT_MAX_FRAME). One more byte is allocated: a payload is NUL-terminated in place.
 */
size_t buf_limit(const struct client *c)
{
	uint32_t l;

	if (c->state == CL_PREAUTH)
		return PREAUTH_MAX;
	l = c->len >= 4 ? frame_len(c->buf) : 0;
	return l <= AGENT_MAX_FRAME && 4 + (size_t)l > BUF_MIN ? 4 + (size_t)l : BUF_MIN;
}

/* Only the target's own user or root may talk to it over the Unix socket. */
static bool peer_allowed(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len))
		return false;
	return cr.uid == 0 || cr.uid == geteuid() || cr.uid == getuid();
}

/* A new Unix connection: the owner gets an owner slot; anyone else is told no and closed
 * (after a moment to read why, while a DENIED slot is free): never a slot the owner needs. */
void admit_unix(int fd)
{
	double now = mono_time();
	int slot;

	if (!peer_allowed(fd)) {
		/* New, empty and non-blocking: this short message never blocks the agent. */
		send_text(
			fd, FRAME_ERROR,
			"permission denied: only the owner of process %d or root may use its agent",
			(int)getpid());
		shutdown(fd, SHUT_WR);
		slot = count_clients(CL_DENIED) < DENIED_SLOTS ? free_slot() : -1;
		if (slot < 0) {
			close(fd);
			return;
		}
		ag.clients[slot] = (struct client){.state = CL_DENIED,
						   .fd = fd,
						   .since = now,
						   .deadline = now + DENIED_LINGER_S};
		return;
	}
	slot = count_clients(CL_OWNER) < OWNER_SLOTS ? free_slot() : -1;
	if (slot < 0) {
		send_text(fd, FRAME_ERROR, "too many clients: %d connections of the owner are open",
			  OWNER_SLOTS);
		close(fd);
		return;
	}
	set_trusted_io(fd);
	ag.clients[slot] = (struct client){.state = CL_OWNER, .fd = fd, .since = now};
}

/* A new TCP connection: a PREAUTH slot (the oldest one's holder is dropped when all are
 * taken, except for an address that may not try now), AUTH_TIMEOUT_S to authenticate. */
void admit_tcp(int fd, const struct sockaddr_storage *ss)
{
	double now = mono_time();
	unsigned char key[16];
	int one = 1, slot, i, oldest = -1;

	addr_key(ss, key);
	if (count_clients(CL_PREAUTH) >= PREAUTH_SLOTS) {
		if (auth_wait(key, now) > 0) {
			close(fd);
			return;
		}
		for (i = 0; i < MAX_CLIENTS; i++)
			if (ag.clients[i].state == CL_PREAUTH &&
			    (oldest < 0 || ag.clients[i].since < ag.clients[oldest].since))
				oldest = i;
		drop_client(oldest);
	}
	slot = free_slot();
	if (slot < 0) {
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ag.clients[slot] = (struct client){
		.state = CL_PREAUTH, .fd = fd, .since = now, .deadline = now + AUTH_TIMEOUT_S};
	memcpy(ag.clients[slot].addr, key, 16);
}

/*
 * The frame at the head of pre-auth client @c's buffer: before authentication only one small
 * "auth" request is read; anything else (a big frame announced, garbage) ends the connection
 * at once.
 */
bool auth_frame_bad(const struct client *c)
{
	uint32_t l = frame_len(c->buf);

	return !l || l > PREAUTH_MAX - 4 || (c->len >= 5 && c->buf[4] != FRAME_REQUEST);
}

/* A pre-auth client's time is up: a failure, as a wrong token is. */
void auth_timed_out(int i, double now)
{
	struct client *c = &ag.clients[i];

	auth_failed(c->addr, now);
	send_text(c->fd, FRAME_ERROR, "authentication timed out: send the token first");
}

int auth_new_token(void)
{
	unsigned char rnd[16];
	int i;

	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -errno;
	memset(token, 0, sizeof(token));
	for (i = 0; i < 16; i++)
		snprintf(token + 2 * i, 3, "%02x", rnd[i]);
	return 0;
}

void auth_set_token(const char *t)
{
	memset(token, 0, sizeof(token));
	memcpy(token, t, strlen(t));
}

const char *auth_token(void)
{
	return token;
}

void auth_atfork_child(void)
{
	memset(token, 0, sizeof(token));
	memset(fails, 0, sizeof(fails));
}
