// SPDX-License-Identifier: MIT
/* pyrepr: Python reprs of floats, ints, str and bytes computed from their contents. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "python/pyrepr.h"

bool pyrepr_printable(uint32_t cp)
{
	size_t lo = 0, hi = pyrepr_nonprintable_nr;

	if (cp >= 0x20 && cp < 0x7f)
		return true;
	if (cp > 0x10ffff)
		return false;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (cp < pyrepr_nonprintable[mid][0])
			hi = mid;
		else if (cp > pyrepr_nonprintable[mid][1])
			lo = mid + 1;
		else
			return false;
	}
	return true;
}

/* ---- float -------------------------------------------------------------------------------- */

/* Fixed notation pads with at most 16 zeros: it is used for 1e-4 <= |v| < 1e16 only. */
#define ZEROS "0000000000000000"

/*
 * The digits of "%.*e" output @buf (any decimal point, locale or not) into @digits, and its
 * exponent. Return the number of digits.
 */
static int split_e(const char *buf, char *digits, int size, int *exp)
{
	int n = 0;

	for (; *buf && *buf != 'e'; buf++)
		if (*buf >= '0' && *buf <= '9' && n < size - 1)
			digits[n++] = *buf;
	digits[n] = 0;
	*exp = *buf == 'e' ? atoi(buf + 1) : 0;
	return n;
}

/* @digits (@n of them) x 10^(@exp - @n + 1) as a C double, whatever the locale. */
static double digits_value(const char *digits, int n, int exp)
{
	char buf[64];

	snprintf(buf, sizeof(buf), "%.*se%d", n, digits, exp - n + 1);
	return strtod(buf, NULL);
}

int pyrepr_float(struct strbuf *sb, double v)
{
	char buf[64], digits[24];
	int p, n = 0, exp = 0, decpt, err;
	double a = fabs(v);

	if (isnan(v))
		return sb_puts(sb, "nan");
	if (isinf(v))
		return sb_puts(sb, v < 0 ? "-inf" : "inf");
	/*
	 * The shortest digit string that reads back to @v, as Python's repr (David Gay's dtoa
	 * mode 0) picks it. glibc's printf rounds correctly, so "%.*e" gives the nearest
	 * p-digit decimal; if it does not read back, the only other p-digit candidate that can
	 * is the one on the other side of @v, when the nearest fell below: at a power of two
	 * the rounding interval is half as wide below as above.
	 */
	for (p = 1; p <= 17; p++) {
		double back;
		int i;

		snprintf(buf, sizeof(buf), "%.*e", p - 1, a);
		n = split_e(buf, digits, sizeof(digits), &exp);
		back = digits_value(digits, n, exp);
		if (back == a)
			break;
		if (back > a)
			continue;
		for (i = n - 1; i >= 0 && digits[i] == '9'; i--)
			digits[i] = '0';
		if (i >= 0) {
			digits[i]++;
		} else {
			/* 99..9 + 1 = 100..0: one more decade */
			digits[0] = '1';
			exp++;
		}
		if (digits_value(digits, n, exp) == a)
			break;
	}
	while (n > 1 && digits[n - 1] == '0')
		n--;
	digits[n] = 0;
	decpt = exp + 1; /* the value is 0.DIGITS x 10^decpt */
	if (signbit(v) && (err = sb_puts(sb, "-")))
		return err;
	/* format_float_short, mode 'r': exponent notation outside 1e-4 <= |v| < 1e16. */
	if (decpt <= -4 || decpt > 16)
		return sb_printf(sb, "%c%s%se%+03d", digits[0], n > 1 ? "." : "", digits + 1,
				 decpt - 1);
	if (decpt <= 0)
		return sb_printf(sb, "0.%.*s%s", -decpt, ZEROS, digits);
	if (decpt >= n)
		return sb_printf(sb, "%s%.*s.0", digits, decpt - n, ZEROS);
	return sb_printf(sb, "%.*s.%s", decpt, digits, digits + decpt);
}

/* ---- int ---------------------------------------------------------------------------------- */

#define DEC_BASE 1000000000u /* 10^9: one decimal limb */

int pyrepr_int(struct strbuf *sb, const uint32_t *digits, size_t ndigits, bool negative,
	       size_t max_repr)
{
	uint32_t *limbs = NULL;
	size_t nl = 0, i, j, cap, total, keep;
	struct strbuf dec = {0};
	char tail[48];
	int err;

	if (max_repr < PYREPR_MIN)
		max_repr = PYREPR_MIN;
	while (ndigits && !(digits[ndigits - 1] & 0x3fffffff))
		ndigits--;
	if (!ndigits)
		return sb_puts(sb, "0");
	if (ndigits > PYREPR_INT_MAX_DIGITS)
		return -E2BIG;
	/* Base 2^30 to base 10^9, most significant digit first (long_to_decimal_string). Each
	 * limb holds more than 29 bits, so ndigits * 30 / 29 + 1 limbs are enough. */
	cap = ndigits + ndigits / 29 + 2;
	limbs = malloc(cap * sizeof(*limbs));
	if (!limbs)
		return -ENOMEM;
	for (i = ndigits; i-- > 0;) {
		uint64_t carry = digits[i] & 0x3fffffff;

		for (j = 0; j < nl; j++) {
			uint64_t z = ((uint64_t)limbs[j] << 30) + carry;

			limbs[j] = (uint32_t)(z % DEC_BASE);
			carry = z / DEC_BASE;
		}
		while (carry && nl < cap) {
			limbs[nl++] = (uint32_t)(carry % DEC_BASE);
			carry /= DEC_BASE;
		}
	}
	err = sb_printf(&dec, "%u", nl ? limbs[nl - 1] : 0);
	for (i = nl - 1; !err && i-- > 0;)
		err = sb_printf(&dec, "%09u", limbs[i]);
	if (err)
		goto cleanup;
	total = dec.len + negative;
	if (total <= max_repr) {
		err = sb_printf(sb, "%s%s", negative ? "-" : "", sb_str(&dec));
		goto cleanup;
	}
	snprintf(tail, sizeof(tail), "...(%zu digits)", dec.len);
	keep = max_repr > strlen(tail) + negative + 1 ? max_repr - strlen(tail) - negative : 1;
	err = sb_printf(sb, "%s%.*s%s", negative ? "-" : "", (int)keep, sb_str(&dec), tail);
cleanup:
	sb_free(&dec);
	free(limbs);
	return err;
}

/* ---- str and bytes ------------------------------------------------------------------------ */

/* Characters the repr of code point (or byte) @c takes inside quotes @quote. */
static size_t esc_len(uint32_t c, uint32_t quote, bool bytes)
{
	if (c == quote || c == '\\' || c == '\t' || c == '\n' || c == '\r')
		return 2;
	if (c < 0x20 || c == 0x7f)
		return 4;
	if (c < 0x7f)
		return 1;
	if (bytes)
		return 4;
	if (pyrepr_printable(c))
		return 1;
	return c <= 0xff ? 4 : c <= 0xffff ? 6 : 10;
}

static int esc_put(struct strbuf *sb, uint32_t c, uint32_t quote, bool bytes)
{
	char buf[16];
	size_t n;

	switch (c) {
	case '\t':
		return sb_puts(sb, "\\t");
	case '\n':
		return sb_puts(sb, "\\n");
	case '\r':
		return sb_puts(sb, "\\r");
	}
	if (c == quote || c == '\\')
		return sb_printf(sb, "\\%c", (char)c);
	if (c >= 0x20 && c < 0x7f)
		return sb_append(sb, (const char *)&(char){(char)c}, 1);
	if (!bytes && c >= 0x80 && pyrepr_printable(c)) {
		/* UTF-8: the table only lets valid scalar values through. */
		if (c < 0x800) {
			buf[0] = (char)(0xc0 | c >> 6);
			n = 1;
		} else if (c < 0x10000) {
			buf[0] = (char)(0xe0 | c >> 12);
			buf[1] = (char)(0x80 | ((c >> 6) & 0x3f));
			n = 2;
		} else {
			buf[0] = (char)(0xf0 | c >> 18);
			buf[1] = (char)(0x80 | ((c >> 12) & 0x3f));
			buf[2] = (char)(0x80 | ((c >> 6) & 0x3f));
			n = 3;
		}
		buf[n++] = (char)(0x80 | (c & 0x3f));
		return sb_append(sb, buf, n);
	}
	if (c <= 0xff)
		return sb_printf(sb, "\\x%02x", c);
	if (c <= 0xffff)
		return sb_printf(sb, "\\u%04x", c);
	return sb_printf(sb, "\\U%08x", c);
}

static uint32_t at(const void *data, size_t i, bool bytes)
{
	return bytes ? ((const uint8_t *)data)[i] : ((const uint32_t *)data)[i];
}

/* Python's choice: single quotes unless the text has ' and no ". */
static uint32_t pick_quote(bool squote, bool dquote)
{
	return squote && !dquote ? '"' : '\'';
}

static int quoted_repr(struct strbuf *sb, const void *data, size_t n, size_t total, size_t max_repr,
		       bool bytes)
{
	size_t i, best = 0, len_s = 0, len_d = 0, pre = bytes ? 1 : 0;
	bool sq = false, dq = false, full = false, bsq = false, bdq = false;
	uint32_t quote;
	int err;

	if (max_repr < PYREPR_MIN)
		max_repr = PYREPR_MIN;
	if (n > total)
		n = total;
	/* The longest prefix whose repr, plus "..." when it is not all, fits in max_repr. The
	 * length is not monotonic (a ' switches to double quotes), so look at every prefix. */
	for (i = 0;; i++) {
		size_t len = pre + 2 + (pick_quote(sq, dq) == '"' ? len_d : len_s);

		if (i == total) {
			if (len <= max_repr) {
				best = i;
				full = true;
				bsq = sq;
				bdq = dq;
			}
			break;
		}
		if (len + 3 <= max_repr) {
			best = i;
			bsq = sq;
			bdq = dq;
		}
		if (i == n || len > max_repr + 8)
			break; /* no longer prefix can fit: every char adds at least one */
		sq |= at(data, i, bytes) == '\'';
		dq |= at(data, i, bytes) == '"';
		len_s += esc_len(at(data, i, bytes), '\'', bytes);
		len_d += esc_len(at(data, i, bytes), '"', bytes);
	}
	quote = pick_quote(bsq, bdq);
	err = sb_printf(sb, "%s%c", bytes ? "b" : "", (char)quote);
	for (i = 0; !err && i < best; i++)
		err = esc_put(sb, at(data, i, bytes), quote, bytes);
	if (!err)
		err = sb_printf(sb, "%c%s", (char)quote, full ? "" : "...");
	return err;
}

int pyrepr_str(struct strbuf *sb, const uint32_t *cps, size_t n, size_t total, size_t max_repr)
{
	return quoted_repr(sb, cps, n, total, max_repr, false);
}

int pyrepr_bytes(struct strbuf *sb, const uint8_t *b, size_t n, size_t total, size_t max_repr)
{
	return quoted_repr(sb, b, n, total, max_repr, true);
}
