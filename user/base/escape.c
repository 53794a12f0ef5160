// SPDX-License-Identifier: MIT
/* Escaping for text, XML, JSON and CSV; UTF-8 decoding and display width. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/escape.h"

static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */

int utf8_decode(const char *str, size_t n, uint32_t *cp)
{
	const unsigned char *s = (const unsigned char *)str;
	uint32_t c, min;
	int len, i;

	if (!n)
		return 0;
	c = s[0];
	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if ((c & 0xe0) == 0xc0) {
		len = 2, c &= 0x1f, min = 0x80;
	} else if ((c & 0xf0) == 0xe0) {
		len = 3, c &= 0x0f, min = 0x800;
	} else if ((c & 0xf8) == 0xf0) {
		len = 4, c &= 0x07, min = 0x10000;
	} else {
		return 0; /* a continuation byte, or 0xf8..0xff */
	}
	if ((size_t)len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	/* RFC 3629: no overlong forms, no UTF-16 surrogates, nothing above U+10FFFF. */
	if (c < min || (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
		return 0;
	*cp = c;
	return len;
}

/* Wide (two-column) code points: the East Asian Wide/Fullwidth blocks and emoji. */
static int cp_width(uint32_t c)
{
	static const uint32_t wide[][2] = {
		{0x1100, 0x115f},   {0x2e80, 0x303e},	{0x3041, 0x33ff},   {0x3400, 0x4dbf},
		{0x4e00, 0x9fff},   {0xa000, 0xa4cf},	{0xac00, 0xd7a3},   {0xf900, 0xfaff},
		{0xfe30, 0xfe4f},   {0xff00, 0xff60},	{0xffe0, 0xffe6},   {0x1f300, 0x1f64f},
		{0x1f900, 0x1f9ff}, {0x20000, 0x2fffd}, {0x30000, 0x3fffd},
	};
	size_t i;

	/* Combining marks take no column of their own. */
	if ((c >= 0x300 && c <= 0x36f) || (c >= 0x200b && c <= 0x200f) || c == 0xfe0f)
		return 0;
	for (i = 0; i < ARRAY_SIZE(wide); i++)
		if (c >= wide[i][0] && c <= wide[i][1])
			return 2;
	return 1;
}

size_t utf8_width(const char *s, size_t n)
{
	size_t i = 0, w = 0;
	uint32_t cp;
	int len;

	while (i < n) {
		len = utf8_decode(s + i, n - i, &cp);
		if (!len) {
			w++;
			i++;
			continue;
		}
		w += cp_width(cp);
		i += len;
	}
	return w;
}

bool utf8_valid(const char *s, size_t n)
{
	size_t i = 0;
	uint32_t cp;
	int len;

	while (i < n) {
		if ((unsigned char)s[i] < 0x80) {
			i++;
			continue;
		}
		len = utf8_decode(s + i, n - i, &cp);
		if (!len)
			return false;
		i += len;
	}
	return true;
}

int utf8_repair(struct strbuf *sb, const char *s, size_t n)
{
	size_t i = 0, run = 0;
	uint32_t cp;
	int len, err = 0;

	while (!err && i < n) {
		len = (unsigned char)s[i] < 0x80 ? 1 : utf8_decode(s + i, n - i, &cp);
		if (len) {
			i += len;
			run += len;
			continue;
		}
		err = sb_append(sb, s + i - run, run) ?: sb_append(sb, replacement, 3);
		run = 0;
		i++;
	}
	return err ?: sb_append(sb, s + i - run, run);
}

const char *utf8_text(struct strbuf *sb, const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (!s || utf8_valid(s, n))
		return s;
	sb_reset(sb);
	return utf8_repair(sb, s, n) ? NULL : sb_str(sb);
}

/*
 * Code points that are valid UTF-8 but must not reach a terminal as they are: C1 controls
 * (U+009B is CSI to a terminal that decodes them), and invisible characters that move or
 * reorder the text around them (bidirectional controls, line and paragraph separators).
 */
static bool cp_hidden(uint32_t c)
{
	return (c >= 0x80 && c <= 0x9f) || c == 0x61c || c == 0x200e || c == 0x200f ||
	       (c >= 0x2028 && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069);
}

int text_escape(struct strbuf *sb, const char *s, size_t n, unsigned int flags)
{
	bool lines = flags & TEXT_LINES;
	size_t i = 0, run = 0;
	const char *rep;
	char esc[8];
	uint32_t cp;
	int len, err;

	err = sb_reserve(sb, n);
	while (!err && i < n) {
		unsigned char c = s[i];

		rep = NULL;
		len = 1;
		if (c == '\n')
			rep = lines ? NULL : "\\n";
		else if (c == '\t')
			rep = lines ? NULL : "\\t";
		else if (c == '\r')
			rep = "\\r";
		else if (c < 0x20 || c == 0x7f)
			rep = esc;
		else if (c >= 0x80) {
			len = utf8_decode(s + i, n - i, &cp);
			if (!len)
				len = 1, rep = esc; /* invalid: the byte itself */
			else if (cp_hidden(cp))
				rep = esc;
		}
		if (rep == esc) {
			if (len == 1)
				snprintf(esc, sizeof(esc), "\\x%02x", c);
			else
				snprintf(esc, sizeof(esc), "\\u%04x", (unsigned int)cp);
		}
		if (!rep) {
			i += len;
			run += len;
			continue;
		}
		err = sb_append(sb, s + i - run, run);
		if (!err)
			err = sb_puts(sb, rep);
		run = 0;
		i += len;
	}
	return err ? err : sb_append(sb, s + i - run, run);
}

const char *text_str(struct strbuf *sb, const char *s, unsigned int flags)
{
	sb_reset(sb);
	if (!s || text_escape(sb, s, strlen(s), flags))
		return "?";
	return sb_str(sb);
}

int xml_escape(struct strbuf *sb, const char *s, size_t n)
{
	size_t i = 0, run = 0;
	const char *rep;
	uint32_t cp;
	int len, err;

	err = sb_reserve(sb, n + n / 8);
	if (err)
		return err;
	while (i < n) {
		unsigned char c = s[i];

		rep = NULL;
		len = 1;
		if (c == '&')
			rep = "&amp;";
		else if (c == '<')
			rep = "&lt;";
		else if (c == '>')
			rep = "&gt;";
		else if (c == '"')
			rep = "&quot;";
		else if (c == '\'')
			rep = "&#39;";
		else if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
			rep = replacement; /* XML 1.0 forbids these even as character references */
		else if (c >= 0x80) {
			len = utf8_decode(s + i, n - i, &cp);
			if (!len) {
				rep = replacement;
				len = 1;
			} else if (cp == 0xfffe || cp == 0xffff) {
				rep = replacement; /* not XML Chars either */
			}
		}
		if (!rep) {
			i += len;
			run += len;
			continue;
		}
		err = sb_append(sb, s + i - run, run);
		if (!err)
			err = sb_puts(sb, rep);
		if (err)
			return err;
		run = 0;
		i += len;
	}
	return sb_append(sb, s + i - run, run);
}

int json_string(struct strbuf *sb, const char *s, size_t n)
{
	size_t i = 0, run = 0;
	char esc[8];
	const char *rep;
	uint32_t cp;
	int len, err;

	if (!s)
		return sb_puts(sb, "null");
	err = sb_reserve(sb, n + 2);
	if (!err)
		err = sb_append(sb, "\"", 1);
	while (!err && i < n) {
		unsigned char c = s[i];

		rep = NULL;
		len = 1;
		if (c == '"')
			rep = "\\\"";
		else if (c == '\\')
			rep = "\\\\";
		else if (c == '\n')
			rep = "\\n";
		else if (c == '\r')
			rep = "\\r";
		else if (c == '\t')
			rep = "\\t";
		else if (c < 0x20 || c == 0x7f) {
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			rep = esc;
		} else if (c >= 0x80) {
			len = utf8_decode(s + i, n - i, &cp);
			if (!len) {
				rep = "\\ufffd";
				len = 1;
			} else if (cp_hidden(cp)) {
				snprintf(esc, sizeof(esc), "\\u%04x", (unsigned int)cp);
				rep = esc;
			}
		}
		if (!rep) {
			i += len;
			run += len;
			continue;
		}
		err = sb_append(sb, s + i - run, run);
		if (!err)
			err = sb_puts(sb, rep);
		run = 0;
		i += len;
	}
	if (!err)
		err = sb_append(sb, s + i - run, run);
	if (!err)
		err = sb_append(sb, "\"", 1);
	return err;
}

int csv_field(struct strbuf *sb, const char *s, size_t n)
{
	bool quote = n && (s[0] == ' ' || s[n - 1] == ' ');
	size_t i, start;
	int err;

	for (i = 0; !quote && i < n; i++)
		quote = s[i] == ',' || s[i] == '"' || s[i] == '\n' || s[i] == '\r';
	if (!quote)
		return sb_append(sb, s, n);
	err = sb_append(sb, "\"", 1);
	for (i = 0, start = 0; !err && i < n; i++) {
		if (s[i] != '"')
			continue;
		/* Copy up to and including the quote, then double it. */
		err = sb_append(sb, s + start, i - start + 1);
		if (!err)
			err = sb_append(sb, "\"", 1);
		start = i + 1;
	}
	if (!err)
		err = sb_append(sb, s + start, n - start);
	if (!err)
		err = sb_append(sb, "\"", 1);
	return err;
}

int fmt_double(struct strbuf *sb, double v, const char *nonfinite)
{
	char buf[40];

	if (v != v || v - v != 0) /* NaN, or an infinity (inf - inf is NaN) */
		return sb_puts(sb, nonfinite);
	snprintf(buf, sizeof(buf), "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, sizeof(buf), "%.17g", v);
	/* Keep a real recognisable as one: 1.0, not 1 (SQL REAL vs INTEGER). */
	if (!strpbrk(buf, ".e"))
		strcat(buf, ".0");
	return sb_puts(sb, buf);
}
