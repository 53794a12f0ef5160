// SPDX-License-Identifier: MIT
/* Unit tests: text / XML / JSON / CSV escaping, number formatting, UTF-8 decoding and widths. */
#include "test.h"

#include "base/escape.h"

static const char *text(const char *s, size_t n, unsigned int flags)
{
	static struct strbuf sb;

	sb_reset(&sb);
	CHECK_EQ(text_escape(&sb, s, n, flags), 0);
	return sb_str(&sb);
}

static const char *xml(const char *s, size_t n)
{
	static struct strbuf sb;

	sb_reset(&sb);
	CHECK_EQ(xml_escape(&sb, s, n), 0);
	return sb_str(&sb);
}

static const char *json(const char *s, size_t n)
{
	static struct strbuf sb;

	sb_reset(&sb);
	CHECK_EQ(json_string(&sb, s, n), 0);
	return sb_str(&sb);
}

static const char *csv(const char *s)
{
	static struct strbuf sb;

	sb_reset(&sb);
	CHECK_EQ(csv_field(&sb, s, strlen(s)), 0);
	return sb_str(&sb);
}

static const char *dbl(double v)
{
	static struct strbuf sb;

	sb_reset(&sb);
	CHECK_EQ(fmt_double(&sb, v, "null"), 0);
	return sb_str(&sb);
}

#define S(lit) lit, sizeof(lit) - 1

TEST(text_keeps_printable_utf8)
{
	CHECK_STR(text(S("work (train.py:12)"), 0), "work (train.py:12)");
	CHECK_STR(text(S("caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x90\x8d a\\nb \"q\""), 0),
		  "caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x90\x8d a\\nb \"q\"");
	CHECK_STR(text(S(""), 0), "");
}

TEST(text_escapes_control_characters)
{
	/* A newline would forge a line; ESC ] 0 ; ... BEL retitles a terminal. */
	CHECK_STR(text(S("a\nThread 1 \"fake\""), 0), "a\\nThread 1 \"fake\"");
	CHECK_STR(text(S("\x1b]0;pwned\x07x"), 0), "\\x1b]0;pwned\\x07x");
	CHECK_STR(text(S("t\tr\rn\n\x7f"), 0), "t\\tr\\rn\\n\\x7f");
	/* NUL inside the given length is a byte like any other. */
	CHECK_STR(text(S("a\0b"), 0), "a\\x00b");
	/* A block of lines keeps its newlines and tabs, nothing else. */
	CHECK_STR(text(S("l1\n\tl2\r\x1b[2J"), TEXT_LINES), "l1\n\tl2\\r\\x1b[2J");
}

TEST(text_escapes_invalid_utf8_and_hidden_code_points)
{
	/* Each invalid byte as itself: a lone continuation, a truncated sequence, overlong. */
	CHECK_STR(text(S("a\x80z\xe6\xbc"), 0), "a\\x80z\\xe6\\xbc");
	CHECK_STR(text(S("\xc0\xaf\xff"), 0), "\\xc0\\xaf\\xff");
	/* C1 CSI (U+009B), right-to-left override, line separator, isolates. */
	CHECK_STR(text(S("\xc2\x9b"
			 "2J"),
		       0),
		  "\\u009b2J");
	CHECK_STR(text(S("ab\xe2\x80\xae"
			 "dc"),
		       0),
		  "ab\\u202edc");
	CHECK_STR(text(S("\xe2\x80\xa8\xe2\x81\xa6\xd8\x9c"), 0), "\\u2028\\u2066\\u061c");
	/* Neighbours of those ranges stay. */
	CHECK_STR(text(S("\xc2\xa0\xe2\x80\xaf"), 0), "\xc2\xa0\xe2\x80\xaf");
}

TEST(text_escape_is_idempotent_and_leaves_no_control)
{
	static struct strbuf once, twice;
	unsigned char all[256 + 6];
	size_t i, controls = 0;

	for (i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	memcpy(all + 256, "\xc2\x85\xe2\x80\xae", 5);
	all[261] = 'x';
	CHECK_EQ(text_escape(&once, (const char *)all, sizeof(all), 0), 0);
	for (i = 0; i < once.len; i++)
		controls += (unsigned char)once.buf[i] < 0x20 || once.buf[i] == 0x7f;
	CHECK_EQ(controls, 0);
	/* Here every byte >= 0x80 was invalid or hidden: the result is ASCII. */
	CHECK_EQ(utf8_width(once.buf, once.len), once.len);
	CHECK_EQ(text_escape(&twice, once.buf, once.len, 0), 0);
	CHECK_STR(twice.buf, once.buf);
	CHECK_STR(text_str(&twice, NULL, 0), "?");
	CHECK_STR(text_str(&twice, "a\nb", 0), "a\\nb");
	sb_free(&once);
	sb_free(&twice);
}

TEST(xml_escapes_markup)
{
	CHECK_STR(xml(S("std::vector<int>")), "std::vector&lt;int&gt;");
	CHECK_STR(xml(S("<module>")), "&lt;module&gt;");
	CHECK_STR(xml(S("a & b \"c\" 'd'")), "a &amp; b &quot;c&quot; &#39;d&#39;");
	CHECK_STR(xml(S("plain_name")), "plain_name");
	CHECK_STR(xml(S("")), "");
}

TEST(xml_keeps_utf8_and_replaces_what_xml_forbids)
{
	/* Non-ASCII passes through as UTF-8. */
	CHECK_STR(xml(S("caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x94\xa5")),
		  "caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x94\xa5");
	/* Invalid UTF-8 (a lone continuation byte, a truncated sequence) -> U+FFFD each. */
	CHECK_STR(xml(S("a\x80z")), "a\xef\xbf\xbdz");
	CHECK_STR(xml(S("a\xe6\xbc")), "a\xef\xbf\xbd\xef\xbf\xbd");
	/* Control characters are not XML 1.0 characters at all; tab and newline are. */
	CHECK_STR(xml(S("a\x01\x1f"
			"b\tc\n")),
		  "a\xef\xbf\xbd\xef\xbf\xbd"
		  "b\tc\n");
	/* An embedded NUL is replaced too (n counts it). */
	CHECK_STR(xml("a\0b", 3), "a\xef\xbf\xbd"
				  "b");
}

TEST(json_strings)
{
	CHECK_STR(json(S("plain")), "\"plain\"");
	CHECK_STR(json(S("q\"b\\s/")), "\"q\\\"b\\\\s/\"");
	CHECK_STR(json(S("l1\nl2\r\t")), "\"l1\\nl2\\r\\t\"");
	CHECK_STR(json(S("\x01\x1f")), "\"\\u0001\\u001f\"");
	CHECK_STR(json(S("caf\xc3\xa9")), "\"caf\xc3\xa9\"");
	CHECK_STR(json(S("bad\xff")), "\"bad\\ufffd\"");
	/* C1 controls and text-moving invisibles as \u escapes: the same string, inert. */
	CHECK_STR(json(S("\xc2\x9b\xe2\x80\xae\xe2\x80\xa8\x7f")),
		  "\"\\u009b\\u202e\\u2028\\u007f\"");
	CHECK_STR(json(NULL, 0), "null");
	CHECK_STR(json(S("")), "\"\"");
}

TEST(csv_fields_rfc4180)
{
	CHECK_STR(csv("plain"), "plain");
	CHECK_STR(csv(""), "");
	CHECK_STR(csv("a,b"), "\"a,b\"");
	CHECK_STR(csv("say \"hi\""), "\"say \"\"hi\"\"\"");
	CHECK_STR(csv("\""), "\"\"\"\"");
	CHECK_STR(csv("l1\nl2"), "\"l1\nl2\"");
	CHECK_STR(csv("cr\r"), "\"cr\r\"");
	CHECK_STR(csv(" padded"), "\" padded\"");
	CHECK_STR(csv("std::vector<int>"), "std::vector<int>");
}

TEST(doubles_read_back_and_stay_reals)
{
	CHECK_STR(dbl(1.0), "1.0");
	CHECK_STR(dbl(0.1), "0.1");
	CHECK_STR(dbl(-2.5), "-2.5");
	CHECK_STR(dbl(1e300), "1e+300");
	CHECK_STR(dbl(0.30000000000000004), "0.30000000000000004");
	CHECK_STR(dbl(1.0 / 0.0), "null");
	CHECK_STR(dbl(0.0 / 0.0), "null");
	CHECK_STR(dbl(123456789.0), "123456789.0");
}

TEST(utf8_decode_rejects_invalid_forms)
{
	uint32_t cp = 0;

	CHECK_EQ(utf8_decode("A", 1, &cp), 1);
	CHECK_EQ(cp, 'A');
	CHECK_EQ(utf8_decode("\xc3\xa9", 2, &cp), 2);
	CHECK_EQ(cp, 0xe9);
	CHECK_EQ(utf8_decode("\xf0\x9f\x94\xa5", 4, &cp), 4);
	CHECK_EQ(cp, 0x1f525);
	CHECK_EQ(utf8_decode("\xc0\x80", 2, &cp), 0);	      /* overlong NUL */
	CHECK_EQ(utf8_decode("\xed\xa0\x80", 3, &cp), 0);     /* a UTF-16 surrogate */
	CHECK_EQ(utf8_decode("\xf4\x90\x80\x80", 4, &cp), 0); /* above U+10FFFF */
	CHECK_EQ(utf8_decode("\xe6\xbc", 2, &cp), 0);	      /* truncated */
	CHECK_EQ(utf8_decode("\x80", 1, &cp), 0);	      /* lone continuation byte */
}

TEST(utf8_valid_and_repair)
{
	struct strbuf sb = {0};

	CHECK(utf8_valid(S("plain \xc3\xa9 \xf0\x9f\x94\xa5")));
	CHECK(!utf8_valid(S("T\xed\xb3\xbd"))); /* a lone surrogate, as surrogatepass writes it */
	CHECK(!utf8_valid(S("\xff")));
	CHECK(!utf8_valid(S("\xe6\xbc"))); /* truncated */
	CHECK_EQ(utf8_repair(&sb, S("ok \xc3\xa9")), 0);
	CHECK_STR(sb_str(&sb), "ok \xc3\xa9");
	sb_reset(&sb);
	/* each invalid byte is one U+FFFD, as Python's decode(errors="replace") reads them */
	CHECK_EQ(utf8_repair(&sb, S("T\xed\xb3\xbdx\xff")), 0);
	CHECK_STR(sb_str(&sb), "T\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdx\xef\xbf\xbd");
	CHECK(utf8_valid(sb_str(&sb), strlen(sb_str(&sb))));
	sb_free(&sb);
}

TEST(utf8_width_counts_columns)
{
	CHECK_EQ(utf8_width(S("abc")), 3);
	CHECK_EQ(utf8_width(S("caf\xc3\xa9")), 4);
	CHECK_EQ(utf8_width(S("\xe6\xbc\xa2\xe5\xad\x97")), 4); /* two CJK ideographs */
	CHECK_EQ(utf8_width(S("e\xcc\x81")), 1);		/* e + combining acute */
	CHECK_EQ(utf8_width(S("a\xff")), 2);			/* an invalid byte: one column */
}

TEST_MAIN()
