/* SPDX-License-Identifier: MIT */
/*
 * hostport: the one reader of the network addresses probing takes, shared by probing
 * (--listen ADDR, -t HOST:PORT) and the agent (the "listen" request, PROBING_LISTEN), so that
 * both sides accept exactly the same forms and a bad one is refused with a reason before
 * anything is started:
 *
 *   PORT            (--listen only) the default host, 127.0.0.1
 *   HOST:PORT       HOST a name or an IPv4 address
 *   [IPV6]:PORT     an IPv6 address goes in brackets (it has colons of its own)
 *
 * PORT is decimal, 1-65535 (0 too where allowed: "any free port"); nothing else is taken:
 * no sign, no spaces, no service names, no wrap-around (getaddrinfo would read "99999" as
 * port 34463). Header-only (static functions) because the agent library links nothing of
 * probing's.
 */
#ifndef PROBING_HOSTPORT_H
#define PROBING_HOSTPORT_H

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define HOSTPORT_DEFAULT_HOST	"127.0.0.1"
#define HOSTPORT_LISTEN_DEFAULT "127.0.0.1:0" /* probing serve: loopback, any free port */

/*
 * Split @spec into @host (NUL-terminated, brackets removed; "" when @spec is a bare PORT or
 * ":PORT") and *@port. @need_host: a host is required (-t); @port0_ok: port 0 is accepted.
 * Return 0, or -EINVAL with what is wrong, for a user, in @err (200 bytes are enough).
 */
static inline int hostport_parse(const char *spec, bool need_host, bool port0_ok, char *host,
				 size_t hostlen, unsigned int *port, char *err, size_t errlen)
{
	const char *forms =
		need_host ? "HOST:PORT or [IPV6]:PORT" : "PORT, HOST:PORT or [IPV6]:PORT";
	const char *p, *colon, *hs;
	unsigned long v = 0;
	size_t hl = 0, digits = 0;

	host[0] = '\0';
	if (!*spec) {
		snprintf(err, errlen, "empty address: give %s", forms);
		return -EINVAL;
	}
	for (p = spec; *p; p++) {
		if ((unsigned char)*p <= ' ' || *p == 0x7f) {
			snprintf(err, errlen,
				 "'%.80s': spaces or control characters in the address", spec);
			return -EINVAL;
		}
	}
	if (spec[0] == '[') {
		const char *close = strchr(spec, ']');

		if (!close || close[1] != ':') {
			snprintf(err, errlen, "'%.80s' is not [IPV6]:PORT", spec);
			return -EINVAL;
		}
		hs = spec + 1;
		hl = close - hs;
		if (!hl || !memchr(hs, ':', hl) || memchr(hs, '[', hl)) {
			snprintf(err, errlen,
				 "'%.80s': brackets hold an IPv6 address, e.g. [::1]:9400", spec);
			return -EINVAL;
		}
		colon = close + 1;
	} else {
		colon = strchr(spec, ':');
		if (colon && strchr(colon + 1, ':')) {
			snprintf(err, errlen,
				 "'%.80s' is not %s (an IPv6 address goes in brackets: [::1]:9400)",
				 spec, forms);
			return -EINVAL;
		}
		if (strpbrk(spec, "[]")) {
			snprintf(err, errlen, "'%.80s' is not %s", spec, forms);
			return -EINVAL;
		}
		hs = spec;
		hl = colon ? (size_t)(colon - spec) : 0;
	}
	if (need_host && !hl) {
		snprintf(err, errlen, "'%.80s' has no host: give %s", spec, forms);
		return -EINVAL;
	}
	if (hl >= hostlen) {
		snprintf(err, errlen, "'%.80s...': the host name is too long", spec);
		return -EINVAL;
	}
	p = colon ? colon + 1 : spec;
	for (; p[digits] >= '0' && p[digits] <= '9'; digits++)
		if (v <= 65535)
			v = v * 10 + (p[digits] - '0');
	if (!digits || p[digits] || v > 65535 || (!v && !port0_ok)) {
		snprintf(err, errlen, "'%.80s': the port must be a number from %d to 65535%s", spec,
			 port0_ok ? 0 : 1, port0_ok ? " (0: any free port)" : "");
		return -EINVAL;
	}
	memcpy(host, hs, hl);
	host[hl] = '\0';
	*port = v;
	return 0;
}

#endif
