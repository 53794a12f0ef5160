/* SPDX-License-Identifier: MIT */
/*
 * escape: text for the formats the analysis commands write — XML (the flame graph SVG),
 * JSON (query --format json, speedscope) and CSV (RFC 4180) — and UTF-8 helpers.
 *
 * Strings from a recording are not guaranteed to be valid UTF-8 (a demangled symbol from an
 * odd binary, a Python file path in another encoding), but XML and JSON must be. Every
 * escaper here therefore replaces each invalid byte with U+FFFD instead of passing it on.
 */
#ifndef PROBING_ESCAPE_H
#define PROBING_ESCAPE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/*
 * Decode one UTF-8 sequence at @s (at most @n bytes). Return its length (1-4) and the code
 * point in *@cp, or 0 when the bytes there are not valid UTF-8 (overlong forms, surrogates
 * and code points above U+10FFFF are invalid).
 */
int utf8_decode(const char *s, size_t n, uint32_t *cp);

/*
 * Terminal columns @s (@n bytes) takes: East Asian wide and emoji code points count 2,
 * combining marks 0, an invalid byte 1 (it is shown as U+FFFD).
 */
size_t utf8_width(const char *s, size_t n);

/*
 * Append @s (@n bytes) for XML character data or a double-quoted attribute: & < > " ' become
 * entities; control characters XML 1.0 forbids and invalid UTF-8 become U+FFFD.
 * Return 0 or -ENOMEM.
 */
int xml_escape(struct strbuf *sb, const char *s, size_t n);

/*
 * Append @s (@n bytes) as a JSON string, with the surrounding quotes. @s == NULL appends
 * null. Return 0 or -ENOMEM.
 */
int json_string(struct strbuf *sb, const char *s, size_t n);

/*
 * Append @s (@n bytes) as one RFC 4180 CSV field: quoted (with inner quotes doubled) when it
 * holds a comma, a quote, CR or LF, or starts or ends with a space; as is otherwise.
 * Return 0 or -ENOMEM.
 */
int csv_field(struct strbuf *sb, const char *s, size_t n);

/*
 * Append a double in its shortest form that reads back to the same value ("%.15g", else
 * "%.17g"). Infinities and NaN are appended as @nonfinite (JSON has no literal for them).
 */
int fmt_double(struct strbuf *sb, double v, const char *nonfinite);

#endif
