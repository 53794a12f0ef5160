// SPDX-License-Identifier: MIT
/*
 * The live tables the build read from the agent's helpers (livetables.h): what the C side
 * relies on of them. The columns themselves are checked against the running agent's in
 * tests/integration/test_live.py.
 */
#include <string.h>

#include "live/livetables.h"
#include "test.h"

static int columns_are(const struct live_table *t, const char *const *names, size_t n)
{
	size_t i;

	if (!t || t->ncolumns != n)
		return 0;
	for (i = 0; i < n; i++)
		if (strcmp(t->columns[i].name, names[i]))
			return 0;
	return 1;
}

TEST(every_python_table_of_the_docs_is_declared)
{
	static const char *const names[] = {"backtrace", "threads", "modules",	   "objects",
					    "settings",	 "locals",  "torch_trace", "torch_status"};
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const struct live_table *t = live_table__find("python", names[i]);

		REQUIRE(t);
		CHECK(t->ncolumns > 0);
		CHECK(strstr(t->helper, "injector/py/") == t->helper);
	}
	CHECK(!live_table__find("python", "nonexistent"));
	CHECK(!live_table__find("system", "backtrace"));
}

/* The outside reader fills python.backtrace without the agent (livedb.h's hook, rows of
 * backtrace__json_rows): its rows must have the declared columns, in this order. */
TEST(backtrace_columns_are_the_outside_readers_rows)
{
	static const char *const cols[] = {"thread", "tid",    "depth", "func",
					   "file",   "lineno", "kind",	"qualname"};

	CHECK(columns_are(live_table__find("python", "backtrace"), cols, 8));
}

/* torchtrace__save keeps a row once by (pid, seq, ts). */
TEST(torch_trace_has_the_columns_of_its_unique_key)
{
	const struct live_table *t = live_table__find("python", "torch_trace");
	int found = 0;
	size_t i;

	REQUIRE(t);
	for (i = 0; i < t->ncolumns; i++)
		found += !strcmp(t->columns[i].name, "pid") || !strcmp(t->columns[i].name, "seq") ||
			 !strcmp(t->columns[i].name, "ts");
	CHECK_EQ(found, 3);
}

/* Where a table comes from, for the message of an agent that does not serve it. */
TEST(origins)
{
	const struct live_table *t;
	size_t n, i;

	t = live_tables(&n);
	for (i = 0; i < n; i++) {
		if (!strcmp(t[i].helper, "injector/py/agent.py"))
			CHECK_STR(t[i].origin, "the agent");
		else
			CHECK(strstr(t[i].origin, "its helper ") == t[i].origin);
	}
	t = live_table__find("python", "torch_trace");
	REQUIRE(t);
	CHECK(strstr(t->origin, "probing inject -p PID --torch"));
}

TEST_MAIN()
