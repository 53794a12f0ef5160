// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "base/util.h"

int sb_reserve(struct strbuf *sb, size_t n)
{
	size_t cap;
	char *tmp;

	if (sb->len + n + 1 <= sb->cap)
		return 0;
	cap = sb->cap ? sb->cap : 64;
	while (cap < sb->len + n + 1)
		cap *= 2;
	tmp = realloc(sb->buf, cap);
	if (!tmp)
		return -ENOMEM;
	sb->buf = tmp;
	sb->cap = cap;
	return 0;
}

int sb_append(struct strbuf *sb, const char *s, size_t n)
{
	int err = sb_reserve(sb, n);

	if (err)
		return err;
	memcpy(sb->buf + sb->len, s, n);
	sb->len += n;
	sb->buf[sb->len] = '\0';
	return 0;
}

int sb_puts(struct strbuf *sb, const char *s)
{
	return sb_append(sb, s, strlen(s));
}

int sb_printf(struct strbuf *sb, const char *fmt, ...)
{
	va_list ap;
	int n, err;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	err = sb_reserve(sb, n);
	if (err)
		return err;
	va_start(ap, fmt);
	vsnprintf(sb->buf + sb->len, n + 1, fmt, ap);
	va_end(ap);
	sb->len += n;
	return 0;
}

void sb_reset(struct strbuf *sb)
{
	sb->len = 0;
	if (sb->buf)
		sb->buf[0] = '\0';
}

void sb_free(struct strbuf *sb)
{
	free(sb->buf);
	sb->buf = NULL;
	sb->len = sb->cap = 0;
}

int sql_view_def(const char *script, const char *name, struct strbuf *sb)
{
	size_t len = strlen(name);
	const char *p = script, *end;

	while ((p = strstr(p, "CREATE VIEW "))) {
		p += strlen("CREATE VIEW ");
		if (strncmp(p, name, len) || strncmp(p + len, " AS", 3))
			continue;
		end = strstr(p, ";\n");
		end = end ? end + 1 : p + strlen(p);
		p -= strlen("CREATE VIEW ");
		return sb_append(sb, p, end - p);
	}
	return -ENOENT;
}

const char *sb_str(const struct strbuf *sb)
{
	return sb->buf ? sb->buf : "";
}

int parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 0);
	if (*end || end == s)
		return -EINVAL;
	if (errno == ERANGE || v < lo || v > hi)
		return -ERANGE;
	*out = v;
	return 0;
}

int parse_seconds(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (*end == 's' && end[1] == '\0')
		end++;
	if (*end || end == s || isnan(v))
		return -EINVAL;
	if (errno == ERANGE || v < lo || v > hi)
		return -ERANGE;
	*out = v;
	return 0;
}

int parse_duration(const char *s, double lo, double hi, double *out)
{
	char buf[64];
	size_t n = strlen(s);
	double mult = 1;

	if (!n || n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, n + 1);
	switch (buf[n - 1]) {
	case 's':
		mult = 1;
		break;
	case 'm':
		mult = 60;
		break;
	case 'h':
		mult = 3600;
		break;
	case 'd':
		mult = 86400;
		break;
	default:
		mult = 0;
	}
	if (mult)
		buf[n - 1] = '\0';
	else
		mult = 1;
	if (parse_seconds(buf, lo / mult, hi / mult, out))
		return -EINVAL;
	*out *= mult;
	return 0;
}

const char *fmt_thousands(char *buf, size_t size, uint64_t v)
{
	char digits[24];
	size_t n, i, o = 0;

	if (!size)
		return buf;
	n = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)v);
	for (i = 0; i < n; i++) {
		bool comma = i && (n - i) % 3 == 0;

		if (o + comma + 1 >= size)
			break;
		if (comma)
			buf[o++] = ',';
		buf[o++] = digits[i];
	}
	buf[o] = '\0';
	return buf;
}

char *read_file(const char *path, size_t limit, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = NULL, *tmp;
	int fd, saved;
	ssize_t r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	buf = malloc(cap);
	if (!buf)
		goto fail;
	for (;;) {
		if (n + 1 >= cap) {
			tmp = realloc(buf, cap * 2);
			if (!tmp)
				goto fail;
			buf = tmp;
			cap *= 2;
		}
		r = read(fd, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto fail;
		if (r == 0)
			break;
		n += r;
		if (limit && n >= limit) {
			n = limit;
			break;
		}
	}
	close(fd);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
fail:
	saved = errno ? errno : ENOMEM;
	free(buf);
	close(fd);
	errno = saved;
	return NULL;
}

int grow_array(void *arr, size_t *cap, size_t need, size_t elem)
{
	void **p = arr, *tmp;
	size_t ncap = *cap ? *cap : 16;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	tmp = realloc(*p, ncap * elem);
	if (!tmp)
		return -ENOMEM;
	*p = tmp;
	*cap = ncap;
	return 0;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

uint64_t now_mono_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

uint64_t now_real_ns(void)
{
	return clock_ns(CLOCK_REALTIME);
}

uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	uint64_t w;

	/* A word at a time (multiply-xorshift), then the tail a byte at a time. */
	for (; n >= 8; n -= 8, c += 8) {
		memcpy(&w, c, 8);
		h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
		h ^= h >> 29;
	}
	while (n--) {
		h ^= *c++;
		h *= 0x100000001b3ULL;
	}
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ULL;
	return h ^ (h >> 32);
}

int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	ssize_t w;

	while (n) {
		w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= w;
	}
	return 0;
}

bool stdout_is_tty(void)
{
	static int v = -1;

	if (v < 0)
		v = isatty(STDOUT_FILENO);
	return v;
}

bool stderr_is_tty(void)
{
	static int v = -1;

	if (v < 0)
		v = isatty(STDERR_FILENO);
	return v;
}
