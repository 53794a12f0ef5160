// SPDX-License-Identifier: MIT
/*
 * pylines against the interpreters' own answers: tests/unit/pylines_vectors.txt holds, for
 * every code object of pylines_sample.py compiled by each CPython 3.8-3.13, the raw line table
 * and what PyCode_Addr2Line returned for every instruction (gen_pylines_vectors.py). The
 * integration test test_python_lines regenerates the vectors live from every interpreter on
 * the machine and runs this binary on them (PROBING_PYLINES_VECTORS=FILE).
 *
 * Jumps likewise: tests/unit/pyjump_vectors.txt holds the code of every code object of
 * pylines_sample.py (3.10-3.13), and of hot functions as a running interpreter quickened and
 * instrumented them, with dis's target for every unconditional jump (gen_pyjump_vectors.py;
 * PROBING_PYJUMP_VECTORS=FILE for vectors generated live).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pyoffsets/pyoffsets.h"
#include "python/pylines.h"
#include "test.h"
#include "base/util.h"

static const char *vectors_path(void)
{
	const char *p = getenv("PROBING_PYLINES_VECTORS");

	return p && *p ? p : "tests/unit/pylines_vectors.txt";
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

struct vec_stats {
	int codes, checked, versions_seen; /* versions_seen: bit (minor - PY_MINOR_MIN) */
	char first_failure[512];
};

/* Check one vector line; return 0 if every address agrees, -1 (and a message) otherwise. */
static int check_line(char *line, struct vec_stats *st)
{
	char *save = NULL, *ver, *name, *first, *nbytes, *hex, *lines, *tok, *tsave = NULL;
	unsigned int minor;
	uint8_t *tab = NULL;
	size_t len = 0, i;
	int firstlineno, n, addr = -2, ret = -1;

	ver = strtok_r(line, " \n", &save);
	name = strtok_r(NULL, " \n", &save);
	first = strtok_r(NULL, " \n", &save);
	nbytes = strtok_r(NULL, " \n", &save);
	hex = strtok_r(NULL, " \n", &save);
	lines = strtok_r(NULL, " \n", &save);
	if (!lines || sscanf(ver, "3.%u", &minor) != 1 || minor < PY_MINOR_MIN ||
	    minor > PY_MINOR_MAX) {
		snprintf(st->first_failure, sizeof(st->first_failure), "malformed line");
		return -1;
	}
	firstlineno = atoi(first);
	n = atoi(nbytes);
	if (strcmp(hex, "-")) {
		size_t hl = strlen(hex);

		tab = malloc(hl / 2 + 1);
		if (!tab)
			return -1;
		for (i = 0; i + 1 < hl; i += 2)
			tab[len++] = (uint8_t)(hexval(hex[i]) << 4 | hexval(hex[i + 1]));
	}
	for (tok = strtok_r(lines, ",", &tsave); tok; tok = strtok_r(NULL, ",", &tsave)) {
		char *star = strchr(tok, '*');
		int want = atoi(tok), count = star ? atoi(star + 1) : 1;

		for (; count > 0; count--, addr += 2) {
			int got = pylines_line(PY_VER(3, minor), tab, len, firstlineno, addr / 2);

			st->checked++;
			if (got != want) {
				snprintf(st->first_failure, sizeof(st->first_failure),
					 "3.%u %s: byte offset %d: decoded line %d, interpreter "
					 "said %d",
					 minor, name, addr, got, want);
				goto cleanup;
			}
		}
	}
	if (addr != n) {
		snprintf(st->first_failure, sizeof(st->first_failure),
			 "3.%u %s: %d bytes of code but lines for %d", minor, name, n, addr);
		goto cleanup;
	}
	st->codes++;
	st->versions_seen |= 1 << (minor - PY_MINOR_MIN);
	ret = 0;
cleanup:
	free(tab);
	return ret;
}

TEST(vectors_match_interpreters)
{
	struct vec_stats st = {0};
	size_t len;
	char *text = read_file(vectors_path(), 0, &len), *save = NULL, *line;

	REQUIRE(text);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!*line || *line == '#')
			continue;
		if (check_line(line, &st)) {
			TEST_FAIL_("%s", st.first_failure);
			break;
		}
	}
	free(text);
	CHECK(st.codes > 0);
	CHECK(st.checked > st.codes);
	if (!getenv("PROBING_PYLINES_VECTORS"))
		/* the checked-in file covers every supported version */
		CHECK_EQ(st.versions_seen, (1 << (PY_MINOR_MAX - PY_MINOR_MIN + 1)) - 1);
}

TEST(negative_offset_is_firstlineno)
{
	static const uint8_t loc[] = {0x80, 0x00};

	CHECK_EQ(pylines_line(PY_VER(3, 8), NULL, 0, 7, -1), 7);
	CHECK_EQ(pylines_line(PY_VER(3, 10), NULL, 0, 7, -1), 7);
	CHECK_EQ(pylines_line(PY_VER(3, 12), loc, sizeof(loc), 7, -1), 7);
}

TEST(empty_and_past_end)
{
	static const uint8_t lt310[] = {4, 1};	   /* bytes [0,4): line + 1 */
	static const uint8_t loc[] = {0xd9, 0x00}; /* ONE_LINE1, 2 units */

	CHECK_EQ(pylines_lnotab(NULL, 0, 3, 10), 3);
	CHECK_EQ(pylines_linetable310(lt310, sizeof(lt310), 3, 2), 4);
	CHECK_EQ(pylines_linetable310(lt310, sizeof(lt310), 3, 4), -1);
	CHECK_EQ(pylines_locations(loc, sizeof(loc), 3, 2), 4);
	CHECK_EQ(pylines_locations(loc, sizeof(loc), 3, 4), -1);
}

TEST(location_forms)
{
	/* LONG (code 14, 1 unit): line +300 (svarint 600 = 0x18 | 0x40, 0x09), end line delta
	 * 0, col 1, end col 2; then NO_COLUMNS (13, 1 unit): line -5 (svarint 11); then NONE
	 * (15, 1 unit); then SHORT (0, 1 unit) */
	static const uint8_t tab[] = {0xf0, 0x58, 0x09, 0x00, 0x01, 0x02,
				      0xe8, 0x0b, 0xf8, 0x80, 0x00};

	CHECK_EQ(pylines_locations(tab, sizeof(tab), 10, 0), 310);
	CHECK_EQ(pylines_locations(tab, sizeof(tab), 10, 2), 305);
	CHECK_EQ(pylines_locations(tab, sizeof(tab), 10, 4), -1);
	CHECK_EQ(pylines_locations(tab, sizeof(tab), 10, 6), 305);
}

TEST(corrupt_tables_do_not_overrun)
{
	static const uint8_t trunc_varint[] = {0xf0, 0x40}; /* continuation, then nothing */
	static const uint8_t no_start[] = {0x01, 0x02};	    /* no entry-start bit */
	static const uint8_t odd[] = {2, 1, 2};		    /* odd length: last byte ignored */

	CHECK_EQ(pylines_locations(trunc_varint, sizeof(trunc_varint), 1, 0), -1);
	CHECK_EQ(pylines_locations(no_start, sizeof(no_start), 1, 0), -1);
	CHECK_EQ(pylines_lnotab(odd, sizeof(odd), 1, 100), 2);
	CHECK_EQ(pylines_linetable310(odd, sizeof(odd), 1, 100), -1);
}

/* ---- jumps --------------------------------------------------------------------------------- */

static const char *jump_vectors_path(void)
{
	const char *p = getenv("PROBING_PYJUMP_VECTORS");

	return p && *p ? p : "tests/unit/pyjump_vectors.txt";
}

struct jump_stats {
	int codes, jumps, extended, others, versions_seen; /* bit (minor - PY_MINOR_MIN) */
	char first_failure[512];
};

/* Check one "J 3.X name codehex index:target,..." line; 0, or -1 with a message. */
static int check_jump_line(char *line, struct jump_stats *st)
{
	char *save = NULL, *tag, *ver, *name, *hex, *list, *tok, *tsave = NULL;
	unsigned int minor;
	uint8_t *code = NULL;
	size_t hl, n = 0, i;
	int ret = -1;

	tag = strtok_r(line, " ", &save);
	ver = strtok_r(NULL, " ", &save);
	name = strtok_r(NULL, " ", &save);
	hex = strtok_r(NULL, " ", &save);
	list = strtok_r(NULL, " \n", &save);
	if (!list || strcmp(tag, "J") || sscanf(ver, "3.%u", &minor) != 1 || minor < 10 ||
	    minor > PY_MINOR_MAX) {
		snprintf(st->first_failure, sizeof(st->first_failure), "malformed line");
		return -1;
	}
	hl = strlen(hex);
	code = malloc(hl / 2 + 1);
	if (!code)
		return -1;
	for (i = 0; i + 1 < hl; i += 2)
		code[n++] = (uint8_t)(hexval(hex[i]) << 4 | hexval(hex[i + 1]));
	for (tok = strtok_r(list, ",", &tsave); tok; tok = strtok_r(NULL, ",", &tsave)) {
		int idx = atoi(tok), want = atoi(strchr(tok, ':') + 1);
		int got = pylines_jump_target(PY_VER(3, minor), code, n / 2, idx);

		if (got != want) {
			snprintf(st->first_failure, sizeof(st->first_failure),
				 "3.%u %s: instruction %d: decoded target %d, dis says %d", minor,
				 name, idx, got, want);
			goto cleanup;
		}
		if (want < 0) {
			st->others++;
		} else {
			st->jumps++;
			/* A jump with an EXTENDED_ARG prefix: its argument is over 255. */
			st->extended += abs(want - idx) > 256;
		}
	}
	st->codes++;
	st->versions_seen |= 1 << (minor - PY_MINOR_MIN);
	ret = 0;
cleanup:
	free(code);
	return ret;
}

TEST(jump_vectors_match_interpreters)
{
	struct jump_stats st = {0};
	size_t len;
	char *text = read_file(jump_vectors_path(), 0, &len), *save = NULL, *line;

	REQUIRE(text);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!*line || *line == '#')
			continue;
		if (check_jump_line(line, &st)) {
			TEST_FAIL_("%s", st.first_failure);
			break;
		}
	}
	free(text);
	CHECK(st.codes > 0);
	CHECK(st.jumps > 0);
	CHECK(st.others > st.jumps);
	if (!getenv("PROBING_PYJUMP_VECTORS")) {
		/* the checked-in file covers 3.10 and every later supported version */
		CHECK_EQ(st.versions_seen,
			 (1 << (PY_MINOR_MAX - PY_MINOR_MIN + 1)) - (1 << (10 - PY_MINOR_MIN)));
		CHECK(st.extended > 0);
	}
}

/*
 * def f(xs):               # line 2
 *     n = 0
 *     for x in xs:         # line 4: FOR_ITER
 *         if x:
 *             n += 1
 *     return n
 * The back-edge after the if statement has no line in 3.10 (JUMP_ABSOLUTE) and 3.11
 * (JUMP_BACKWARD, here quickened to JUMP_BACKWARD_QUICK): a thread there resumes at line 4.
 */
TEST(back_edge_without_line_resumes_at_loop_head)
{
	static const uint8_t code310[] = {0x64, 0x01, 0x7d, 0x01, 0x7c, 0x00, 0x44, 0x00,
					  0x5d, 0x08, 0x7d, 0x02, 0x7c, 0x02, 0x72, 0x0c,
					  0x7c, 0x01, 0x64, 0x02, 0x37, 0x00, 0x7d, 0x01,
					  0x71, 0x04, 0x7c, 0x01, 0x53, 0x00};
	static const uint8_t tab310[] = {0x04, 0x01, 0x08, 0x01, 0x04, 0x01,
					 0x08, 0x01, 0x02, 0x80, 0x04, 0x01};
	static const uint8_t code311[] = {0x96, 0x00, 0x64, 0x01, 0xa1, 0x01, 0x7c, 0x00, 0x44,
					  0x00, 0x5d, 0x09, 0xa1, 0x02, 0x7c, 0x02, 0x72, 0x05,
					  0x2d, 0x01, 0x64, 0x02, 0x05, 0x0d, 0x35, 0x00, 0x7d,
					  0x01, 0x26, 0x0a, 0x7c, 0x01, 0x53, 0x00};
	static const uint8_t tab311[] = {0x80, 0x00, 0xd8, 0x08, 0x09, 0x80, 0x41, 0xd8, 0x0d,
					 0x0f, 0xf0, 0x00, 0x02, 0x05, 0x13, 0xf0, 0x00, 0x02,
					 0x05, 0x13, 0x88, 0x01, 0xd8, 0x0b, 0x0c, 0xf0, 0x00,
					 0x01, 0x09, 0x13, 0xd8, 0x0c, 0x0d, 0x90, 0x11, 0x89,
					 0x46, 0x88, 0x41, 0xf8, 0xd8, 0x0b, 0x0c, 0x80, 0x48};

	CHECK_EQ(pylines_line(PY_VER(3, 10), tab310, sizeof(tab310), 2, 12), -1);
	CHECK_EQ(pylines_jump_target(PY_VER(3, 10), code310, sizeof(code310) / 2, 12), 4);
	CHECK_EQ(pylines_jump_line(PY_VER(3, 10), tab310, sizeof(tab310), 2, code310,
				   sizeof(code310) / 2, 12),
		 4);
	CHECK_EQ(pylines_line(PY_VER(3, 11), tab311, sizeof(tab311), 2, 14), -1);
	CHECK_EQ(pylines_jump_target(PY_VER(3, 11), code311, sizeof(code311) / 2, 14), 5);
	CHECK_EQ(pylines_jump_line(PY_VER(3, 11), tab311, sizeof(tab311), 2, code311,
				   sizeof(code311) / 2, 14),
		 4);
	/* Not a jump, inside an instruction's caches, past the code: no answer. */
	CHECK_EQ(pylines_jump_target(PY_VER(3, 11), code311, sizeof(code311) / 2, 13), -1);
	CHECK_EQ(pylines_jump_target(PY_VER(3, 11), code311, sizeof(code311) / 2, 12), -1);
	CHECK_EQ(pylines_jump_target(PY_VER(3, 11), code311, sizeof(code311) / 2, 17), -1);
	CHECK_EQ(pylines_jump_line(PY_VER(3, 11), tab311, sizeof(tab311), 2, NULL, 0, 14), -1);
	/* 3.8 and 3.9 tables give every instruction a line: nothing to decode. */
	CHECK_EQ(pylines_jump_target(PY_VER(3, 9), code310, sizeof(code310) / 2, 12), -1);
}

TEST(cache_entry_is_not_an_extended_arg)
{
	/* 3.11: STORE_ATTR with 4 cache units, the last holding 0x0190 (its low byte is
	 * EXTENDED_ARG's opcode), then JUMP_BACKWARD 6: back to instruction 0, not 261 back. */
	static const uint8_t code[] = {0x5f, 0x00, 0x00, 0x00, 0x00, 0x00,
				       0x00, 0x00, 0x90, 0x01, 0x8c, 0x06};

	CHECK_EQ(pylines_jump_target(PY_VER(3, 11), code, sizeof(code) / 2, 5), 0);
	/* A real prefix: EXTENDED_ARG 1, JUMP_FORWARD 2 -> 2 + 256 + 2 units on. */
	static uint8_t ext[300 * 2] = {0x90, 0x01, 0x6e, 0x02};

	CHECK_EQ(pylines_jump_target(PY_VER(3, 11), ext, sizeof(ext) / 2, 1), 260);
	CHECK_EQ(pylines_jump_target(PY_VER(3, 11), ext, 260, 1), -1); /* past the code */
	/* Hostile code: a long EXTENDED_ARG chain neither overflows nor lands anywhere. */
	static const uint8_t chain[] = {0x90, 0xff, 0x90, 0xff, 0x90, 0xff, 0x90,
					0xff, 0x90, 0xff, 0x8c, 0xff, 0x6e, 0xff};

	CHECK_EQ(pylines_jump_target(PY_VER(3, 11), chain, sizeof(chain) / 2, 5), -1);
	CHECK_EQ(pylines_jump_target(PY_VER(3, 11), chain, sizeof(chain) / 2, 6), -1);
}

TEST_MAIN()
