// SPDX-License-Identifier: MIT
/*
 * pyrepr against the interpreters' own repr(): tests/unit/pyrepr_vectors.txt holds floats,
 * ints, str and bytes with what CPython printed for them (gen_pyrepr_vectors.py, format in
 * its docstring). The integration test test_python_locals regenerates the vectors with every
 * interpreter on the machine and runs this binary on them (PROBING_PYREPR_VECTORS=FILE).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "python/pyrepr.h"
#include "test.h"
#include "base/util.h"

static const char *vectors_path(void)
{
	const char *p = getenv("PROBING_PYREPR_VECTORS");

	return p && *p ? p : "tests/unit/pyrepr_vectors.txt";
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Decode hex text in place ("-" is empty); return the byte count or -1. */
static long unhex(char *s)
{
	size_t n = strlen(s), i;

	if (!strcmp(s, "-"))
		return 0;
	if (n % 2)
		return -1;
	for (i = 0; i < n / 2; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		s[i] = (char)(hi << 4 | lo);
	}
	s[n / 2] = 0;
	return (long)(n / 2);
}

struct stats {
	int lines, failed;
	int kinds[4];
	char first[1024];
};

static void fail(struct stats *st, const char *what, const char *got, const char *want)
{
	if (!st->failed)
		snprintf(st->first, sizeof(st->first), "%s: got [%.300s] want [%.300s]", what, got,
			 want);
	st->failed++;
}

static void check_line(char *line, struct stats *st)
{
	char *f[6], *save = NULL;
	struct strbuf sb = {0};
	int nf = 0;
	long n;

	for (char *t = strtok_r(line, " \n", &save); t && nf < 6; t = strtok_r(NULL, " \n", &save))
		f[nf++] = t;
	st->lines++;
	if (nf < 3) {
		fail(st, "malformed line", "", "");
		return;
	}
	if (!strcmp(f[0], "f") && nf == 3) {
		uint64_t bits = strtoull(f[1], NULL, 16);
		double v;

		memcpy(&v, &bits, 8);
		if (unhex(f[2]) < 0 || pyrepr_float(&sb, v))
			fail(st, "float vector", "", "");
		else if (strcmp(sb_str(&sb), f[2]))
			fail(st, "float", sb_str(&sb), f[2]);
		st->kinds[0]++;
	} else if (!strcmp(f[0], "i") && nf == 5) {
		uint32_t *digits = calloc(strlen(f[3]) + 1, sizeof(*digits));
		size_t nd = 0;

		if (strcmp(f[3], "-"))
			for (char *d = strtok_r(f[3], ",", &save); d;
			     d = strtok_r(NULL, ",", &save))
				digits[nd++] = (uint32_t)strtoul(d, NULL, 16);
		if (unhex(f[4]) < 0 || pyrepr_int(&sb, digits, nd, atoi(f[1]), atoi(f[2])))
			fail(st, "int vector", "", "");
		else if (strcmp(sb_str(&sb), f[4]))
			fail(st, "int", sb_str(&sb), f[4]);
		free(digits);
		st->kinds[1]++;
	} else if (!strcmp(f[0], "s") && nf == 5) {
		size_t ncp = strcmp(f[3], "-") ? strlen(f[3]) / 8 : 0, i;
		uint32_t *cps = calloc(ncp + 1, sizeof(*cps));

		for (i = 0; i < ncp; i++) {
			char tmp[9];

			memcpy(tmp, f[3] + 8 * i, 8);
			tmp[8] = 0;
			cps[i] = (uint32_t)strtoul(tmp, NULL, 16);
		}
		if (unhex(f[4]) < 0 || pyrepr_str(&sb, cps, ncp, atol(f[2]), atoi(f[1])))
			fail(st, "str vector", "", "");
		else if (strcmp(sb_str(&sb), f[4]))
			fail(st, "str", sb_str(&sb), f[4]);
		free(cps);
		st->kinds[2]++;
	} else if (!strcmp(f[0], "b") && nf == 5) {
		n = unhex(f[3]);
		if (n < 0 || unhex(f[4]) < 0 ||
		    pyrepr_bytes(&sb, (const uint8_t *)f[3], (size_t)n, atol(f[2]), atoi(f[1])))
			fail(st, "bytes vector", "", "");
		else if (strcmp(sb_str(&sb), f[4]))
			fail(st, "bytes", sb_str(&sb), f[4]);
		st->kinds[3]++;
	} else {
		fail(st, "malformed line", f[0], "");
	}
	sb_free(&sb);
}

TEST(vectors_match_interpreters)
{
	struct stats st = {0};
	char *text, *line, *save = NULL;
	size_t len;

	text = read_file(vectors_path(), 0, &len);
	REQUIRE(text != NULL);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		check_line(line, &st);
	free(text);
	if (st.failed)
		printf("%d of %d vectors differ; first: %s\n", st.failed, st.lines, st.first);
	CHECK_EQ(st.failed, 0);
	/* Every kind is covered. */
	CHECK(st.kinds[0] > 100 && st.kinds[1] > 50 && st.kinds[2] > 100 && st.kinds[3] > 50);
}

static const char *float_repr(double v)
{
	static struct strbuf sb;

	sb_reset(&sb);
	return pyrepr_float(&sb, v) ? "ERR" : sb_str(&sb);
}

TEST(float_layout)
{
	CHECK_STR(float_repr(0.1), "0.1");
	CHECK_STR(float_repr(-0.0), "-0.0");
	CHECK_STR(float_repr(1e16), "1e+16");
	CHECK_STR(float_repr(1e15), "1000000000000000.0");
	CHECK_STR(float_repr(1e-5), "1e-05");
	CHECK_STR(float_repr(0.0001), "0.0001");
	CHECK_STR(float_repr(1e300), "1e+300");
	CHECK_STR(float_repr(5e-324), "5e-324");
	CHECK_STR(float_repr(1.5), "1.5");
	CHECK_STR(float_repr(__builtin_inf()), "inf");
	CHECK_STR(float_repr(-__builtin_inf()), "-inf");
	CHECK_STR(float_repr(__builtin_nan("")), "nan");
}

TEST(int_limits)
{
	struct strbuf sb = {0};
	uint32_t *big = calloc(PYREPR_INT_MAX_DIGITS + 1, sizeof(*big));
	uint32_t zeros[3] = {0, 0, 0};

	REQUIRE(big);
	/* Leading zero digits (a racing read) are ignored; no digits is zero. */
	CHECK_EQ(pyrepr_int(&sb, zeros, 3, true, 80), 0);
	CHECK_STR(sb_str(&sb), "0");
	sb_reset(&sb);
	big[PYREPR_INT_MAX_DIGITS] = 1;
	CHECK_EQ(pyrepr_int(&sb, big, PYREPR_INT_MAX_DIGITS + 1, false, 80), -E2BIG);
	/* The largest accepted value: 60000 bits, 18062 digits, cut to max_repr. */
	memset(big, 0xff, PYREPR_INT_MAX_DIGITS * sizeof(*big));
	CHECK_EQ(pyrepr_int(&sb, big, PYREPR_INT_MAX_DIGITS, false, 40), 0);
	CHECK_EQ(strlen(sb_str(&sb)), 40);
	CHECK(strstr(sb_str(&sb), "...(18062 digits)") != NULL);
	sb_free(&sb);
	free(big);
}

TEST(str_cut_never_splits_an_escape)
{
	struct strbuf sb = {0};
	uint32_t cps[40];
	size_t i;

	for (i = 0; i < 40; i++)
		cps[i] = 0x1f600 + (i % 2 ? 0 : 0x100000 - 0x1f600 + 0xfffe - 0x10000);
	/* Noncharacters (escaped, 10 characters each) mixed with emoji (shown as is). */
	CHECK_EQ(pyrepr_str(&sb, cps, 40, 40, 30), 0);
	CHECK(strlen(sb_str(&sb)) >= 5);
	CHECK(strstr(sb_str(&sb), "'...") != NULL);
	/* Every backslash starts a whole \U........ escape. */
	for (const char *p = strchr(sb_str(&sb), '\\'); p; p = strchr(p + 1, '\\'))
		CHECK(p[1] == 'U' && strlen(p) >= 10);
	sb_reset(&sb);
	/* max_repr below the minimum is raised to it. */
	CHECK_EQ(pyrepr_str(&sb, cps, 40, 1000, 1), 0);
	CHECK(strstr(sb_str(&sb), "...") != NULL);
	sb_free(&sb);
}

TEST(printable_table)
{
	CHECK(pyrepr_printable('a'));
	CHECK(pyrepr_printable(0xe9));	  /* é */
	CHECK(pyrepr_printable(0x1f40d)); /* snake */
	CHECK(!pyrepr_printable(0x7f));
	CHECK(!pyrepr_printable(0xa0)); /* no-break space: Zs */
	CHECK(!pyrepr_printable(0xad)); /* soft hyphen: Cf */
	CHECK(!pyrepr_printable(0xd800));
	CHECK(!pyrepr_printable(0x2028));
	CHECK(!pyrepr_printable(0x110000));
	CHECK(!pyrepr_printable(0xffffffff));
}

TEST_MAIN()
