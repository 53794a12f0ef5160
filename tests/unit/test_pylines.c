// SPDX-License-Identifier: MIT
/*
 * pylines against the interpreters' own answers: tests/unit/pylines_vectors.txt holds, for
 * every code object of pylines_sample.py compiled by each CPython 3.8-3.13, the raw line table
 * and what PyCode_Addr2Line returned for every instruction (gen_pylines_vectors.py). The
 * integration test test_python_lines regenerates the vectors live from every interpreter on
 * the machine and runs this binary on them (PROBING_PYLINES_VECTORS=FILE).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pylines.h"
#include "test.h"
#include "util.h"

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
	int codes, checked, versions_seen; /* versions_seen: bit (minor - 8) */
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
	if (!lines || sscanf(ver, "3.%u", &minor) != 1 || minor < 8 || minor > 13) {
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
			int got = pylines_line(0x0300 | minor, tab, len, firstlineno, addr / 2);

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
	st->versions_seen |= 1 << (minor - 8);
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
		CHECK_EQ(st.versions_seen, 0x3f); /* the checked-in file covers 3.8-3.13 */
}

TEST(negative_offset_is_firstlineno)
{
	static const uint8_t loc[] = {0x80, 0x00};

	CHECK_EQ(pylines_line(0x0308, NULL, 0, 7, -1), 7);
	CHECK_EQ(pylines_line(0x030a, NULL, 0, 7, -1), 7);
	CHECK_EQ(pylines_line(0x030c, loc, sizeof(loc), 7, -1), 7);
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

TEST_MAIN()
