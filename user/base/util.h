/* SPDX-License-Identifier: MIT */
/* Small helpers shared by every module: growable strings, number parsing, files, time. */
#ifndef PROBING_UTIL_H
#define PROBING_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#ifndef min
/* probing record's default sampling frequency (-F), the one definition of it. */
#define PROBING_DEFAULT_HZ     99
#define PROBING_DEFAULT_HZ_STR "99"

/* Nanoseconds between two samples at @hz (> 0), as the sampler's perf event is set: the
 * sampler, the recording's meta and the store's weights must agree on it. */
static inline uint64_t hz_period_ns(unsigned int hz)
{
	return 1000000000ULL / hz;
}

#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
#endif

/* A growable NUL-terminated string. Zero-initialise ({0}) before use; sb_free() releases. */
struct strbuf {
	char *buf;
	size_t len;
	size_t cap;
};

/* Append; return 0 or -ENOMEM (the buffer is unchanged on failure). */
int sb_append(struct strbuf *sb, const char *s, size_t n);
int sb_puts(struct strbuf *sb, const char *s);
/*
 * Append to @sb the statement "CREATE VIEW @name AS ...;" of the SQL script @script (one
 * statement per ";\n"-ended piece, as probing's schemas are written). Return 0, or -ENOENT
 * when @script defines no view @name, -ENOMEM.
 */
int sql_view_def(const char *script, const char *name, struct strbuf *sb);
int sb_printf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Make sure @n more bytes fit; return 0 or -ENOMEM. */
int sb_reserve(struct strbuf *sb, size_t n);
void sb_reset(struct strbuf *sb);
void sb_free(struct strbuf *sb);
/* The string; never NULL ("" when empty). Valid until the next append. */
const char *sb_str(const struct strbuf *sb);

/*
 * Parse a whole string as a base-10 (or 0x-prefixed) integer in [lo, hi].
 * Return 0, -EINVAL (not a number) or -ERANGE (outside the range).
 */
int parse_long(const char *s, long lo, long hi, long *out);
/* Parse "1.5", "10" as seconds into a double in [lo, hi]; same return values. */
int parse_seconds(const char *s, double lo, double hi, double *out);
/*
 * Parse a duration, "90", "90s", "30m", "2h", "1d", "1.5h" (seconds, minutes, hours, days),
 * as seconds into a double in [lo, hi]. Return 0 or -EINVAL (not a duration, or outside).
 */
int parse_duration(const char *s, double lo, double hi, double *out);

/*
 * @v in decimal with a comma between groups of three digits ("1234567" -> "1,234,567") into
 * @buf (27 bytes hold any value; less is cut short). Returns @buf.
 */
const char *fmt_thousands(char *buf, size_t size, uint64_t v);

/*
 * Read a whole file (up to @limit bytes; 0 = no limit) into a malloc'd NUL-terminated
 * buffer. Return it (caller frees) and its length in *@len, or NULL with errno set.
 */
char *read_file(const char *path, size_t limit, size_t *len);

/*
 * Make room for at least @need elements of @elem bytes in the array *@arr of capacity *@cap
 * (doubling, from 16). @arr is the address of the array pointer. On failure the array is
 * unchanged. Return 0 or -ENOMEM.
 */
int grow_array(void *arr, size_t *cap, size_t need, size_t elem);

/* CLOCK_MONOTONIC and CLOCK_REALTIME in nanoseconds. */
uint64_t now_mono_ns(void);
uint64_t now_real_ns(void);

/* A 64-bit hash of @n bytes, continuing from @h (start with HASH_SEED); not cryptographic. */
#define HASH_SEED 0xcbf29ce484222325ULL
uint64_t hash_bytes(uint64_t h, const void *p, size_t n);

/* Write all of @buf to @fd, retrying on EINTR and short writes. 0 or -errno. */
int write_all(int fd, const void *buf, size_t n);

/* true if stdout/stderr is a terminal (cached at first call). */
bool stdout_is_tty(void);
bool stderr_is_tty(void);

#endif
