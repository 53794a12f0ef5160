/* SPDX-License-Identifier: MIT */
/*
 * escape: text for the formats probing writes — plain text for terminals and text files
 * (text_escape), XML (the flame graph SVG), JSON (query --format json, speedscope, Chrome
 * traces) and CSV (RFC 4180) — and UTF-8 helpers.
 *
 * Names read from a target or a recording (thread names, co_name, file and symbol names,
 * command lines, reprs) are untrusted bytes: a newline in one would forge an output line, an
 * escape sequence would drive the reader's terminal. Every text output passes them through
 * text_escape, so they reach the reader as visible characters. XML and JSON must also be
 * valid UTF-8: their escapers replace each invalid byte with U+FFFD.
 */
#ifndef PROBING_ESCAPE_H
#define PROBING_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

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

/* Whether @s (@n bytes) is valid UTF-8 (as utf8_decode reads it). */
bool utf8_valid(const char *s, size_t n);

/*
 * Append @s (@n bytes) with each byte of invalid UTF-8 replaced by U+FFFD and everything else
 * as it is: text any reader of a SQLite file can decode (SQLite stores what it is given, and
 * Python's sqlite3 refuses a row whose text is not UTF-8). Return 0 or -ENOMEM.
 */
int utf8_repair(struct strbuf *sb, const char *s, size_t n);

/*
 * @s (NUL-terminated) as valid UTF-8: @s itself when it is valid (or NULL), else a repaired
 * copy (utf8_repair) in @sb, which is emptied first; NULL when out of memory for the copy.
 */
const char *utf8_text(struct strbuf *sb, const char *s);

/* text_escape flags */
#define TEXT_LINES 1u /* a block of lines (a repr, a traceback): keep \n and \t as they are */

/*
 * Append @s (@n bytes) as it should reach a terminal or a text file: valid UTF-8 printable
 * characters as they are; \n, \t, \r as those two-character escapes (with TEXT_LINES, \n
 * and \t stay); any other C0 control character, DEL and each byte of invalid UTF-8 as \xNN;
 * C1 controls and the invisible characters that move or reorder text (bidirectional
 * controls U+061C, U+200E/F, U+202A-E, U+2066-9; line/paragraph separators U+2028/9) as
 * \uNNNN. Backslashes stay as they are, so the output is for reading, not for parsing back.
 * The result never holds a control character (but \n and \t with TEXT_LINES), and escaping
 * it again changes nothing. Return 0 or -ENOMEM.
 */
int text_escape(struct strbuf *sb, const char *s, size_t n, unsigned int flags);

/*
 * @s (NUL-terminated) escaped as by text_escape into @sb, which is emptied first; return
 * the escaped text (valid until @sb changes), "?" for @s == NULL or when out of memory.
 * For printf arguments: printf("%s", text_str(&tmp, name, 0)).
 */
const char *text_str(struct strbuf *sb, const char *s, unsigned int flags);

/*
 * Append @s (@n bytes) for XML character data or a double-quoted attribute: & < > " ' become
 * entities; control characters XML 1.0 forbids and invalid UTF-8 become U+FFFD.
 * Return 0 or -ENOMEM.
 */
int xml_escape(struct strbuf *sb, const char *s, size_t n);

/*
 * Append @s (@n bytes) as a JSON string, with the surrounding quotes: control characters,
 * C1 controls and the invisible characters text_escape shows as \uNNNN are \u-escaped
 * (the same string, and harmless if printed raw), invalid UTF-8 becomes U+FFFD. @s == NULL
 * appends null. Return 0 or -ENOMEM.
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
