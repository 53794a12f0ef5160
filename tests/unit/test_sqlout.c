// SPDX-License-Identifier: MIT
/* Unit tests: SQL results as table, CSV and JSON (quotes, commas, newlines, NULL, numbers). */
#include <errno.h>
#include <sqlite3.h>

#include "test.h"

#include "report/sqlout.h"

static char *out_buf;
static size_t out_len;

/* Run @sql on a fresh in-memory database in @format; return what was printed. */
static const char *run(const char *sql, enum sqlout_format format, bool no_header, int *ret)
{
	struct sqlout_options o = {.format = format, .no_header = no_header};
	sqlite3 *db = NULL;
	FILE *f;

	free(out_buf);
	out_buf = NULL;
	f = open_memstream(&out_buf, &out_len);
	if (!f || sqlite3_open(":memory:", &db) != SQLITE_OK)
		return NULL;
	*ret = sqlout__run(db, sql, &o, f);
	fclose(f);
	sqlite3_close(db);
	return out_buf;
}

static const char values[] =
	"SELECT 1 AS i, 2.5 AS r, NULL AS n, 'a,b' AS comma, 'say \"hi\"' AS quote,"
	" 'l1' || char(10) || 'l2' AS nl, 'caf\xc3\xa9' AS u, 3.0 AS whole, -7 AS neg";

TEST(csv)
{
	int ret = -1;

	CHECK_STR(run(values, SQLOUT_CSV, false, &ret),
		  "i,r,n,comma,quote,nl,u,whole,neg\r\n"
		  "1,2.5,,\"a,b\",\"say \"\"hi\"\"\",\"l1\nl2\",caf\xc3\xa9,3.0,-7\r\n");
	CHECK_EQ(ret, 0);
	CHECK_STR(run("SELECT 1 AS a UNION ALL SELECT 2", SQLOUT_CSV, true, &ret), "1\r\n2\r\n");
}

TEST(json_keeps_types)
{
	int ret = -1;

	CHECK_STR(run(values, SQLOUT_JSON, false, &ret),
		  "[\n{\"i\":1,\"r\":2.5,\"n\":null,\"comma\":\"a,b\",\"quote\":\"say \\\"hi\\\"\","
		  "\"nl\":\"l1\\nl2\",\"u\":\"caf\xc3\xa9\",\"whole\":3.0,\"neg\":-7}\n]\n");
	CHECK_EQ(ret, 0);
	/* No rows: an empty array. */
	CHECK_STR(run("SELECT 1 AS a WHERE 0", SQLOUT_JSON, false, &ret), "[]\n");
	/* A blob as hex. */
	CHECK_STR(run("SELECT x'00ff' AS b", SQLOUT_JSON, false, &ret), "[\n{\"b\":\"00ff\"}\n]\n");
}

TEST(json_compact_keeps_column_order_and_duplicates)
{
	int ret = -1;

	/* Keys that JavaScript objects would reorder ("2" before "b") or merge ("a" twice). */
	CHECK_STR(run("SELECT 1 AS b, 2 AS \"2\", 'x' AS a, NULL AS a UNION ALL "
		      "SELECT 3, 4.5, 'y\"', 6",
		      SQLOUT_JSON_COMPACT, false, &ret),
		  "{\"columns\":[\"b\",\"2\",\"a\",\"a\"],\"rows\":[\n"
		  "[1,2,\"x\",null],\n"
		  "[3,4.5,\"y\\\"\",6]\n]}\n");
	CHECK_EQ(ret, 0);
	/* No rows: the columns still. Several statements: one object each, on new lines. */
	CHECK_STR(run("SELECT 1 AS a WHERE 0; SELECT 2 AS c", SQLOUT_JSON_COMPACT, false, &ret),
		  "{\"columns\":[\"a\"],\"rows\":[]}\n"
		  "{\"columns\":[\"c\"],\"rows\":[\n[2]\n]}\n");
}

TEST(table_aligns_columns)
{
	int ret = -1;

	CHECK_STR(run("SELECT 'x' AS name, 5 AS n UNION ALL SELECT 'longer', 12345"
		      " UNION ALL SELECT 'caf\xc3\xa9', NULL",
		      SQLOUT_TABLE, false, &ret),
		  " name   |     n\n"
		  "--------+-------\n"
		  " x      |     5\n"
		  " longer | 12345\n"
		  " caf\xc3\xa9   |  NULL\n"
		  "(3 rows)\n");
	CHECK_EQ(ret, 0);
}

TEST(table_escapes_line_breaks_and_drops_header_on_request)
{
	int ret = -1;

	CHECK_STR(run("SELECT 'a' || char(10) || 'b' AS t, 1.0 AS r", SQLOUT_TABLE, true, &ret),
		  " a\\nb | 1.0\n");
	CHECK_STR(run("SELECT 1 AS one WHERE 0", SQLOUT_TABLE, false, &ret),
		  " one\n-----\n(0 rows)\n");
}

TEST(table_escapes_terminal_controls_and_invalid_utf8)
{
	int ret = -1;

	/* An OSC title sequence, C1 CSI, invalid UTF-8, and the same in a column name. */
	CHECK_STR(run("SELECT char(27) || ']0;pwned' || char(7) || char(155) || '2J'"
		      " || CAST(x'ff41' AS TEXT) AS \"n\x1b[1m\"",
		      SQLOUT_TABLE, false, &ret),
		  " n\\x1b[1m\n"
		  "-------------------------------\n"
		  " \\x1b]0;pwned\\x07\\u009b2J\\xffA\n"
		  "(1 row)\n");
	CHECK_EQ(ret, 0);
}

TEST(statements_run_in_order)
{
	int ret = -1;

	CHECK_STR(run("CREATE TEMP TABLE t(a); INSERT INTO t VALUES (1), (2);"
		      " SELECT a FROM t; SELECT count(*) AS c FROM t; -- the end",
		      SQLOUT_CSV, false, &ret),
		  "a\r\n1\r\n2\r\n\r\nc\r\n2\r\n");
	CHECK_EQ(ret, 0);
	CHECK_STR(run("SELECT 1 AS a; SELECT 2 AS b", SQLOUT_JSON, false, &ret),
		  "[\n{\"a\":1}\n]\n[\n{\"b\":2}\n]\n");
}

TEST(errors_stop_and_report)
{
	int ret = 0;

	/* The first statement's result is printed; the bad one stops the run. */
	CHECK_STR(run("SELECT 1 AS a; SELEC 2; SELECT 3", SQLOUT_CSV, false, &ret), "a\r\n1\r\n");
	CHECK_EQ(ret, -EINVAL);
	run("SELECT * FROM no_such_table", SQLOUT_TABLE, false, &ret);
	CHECK_EQ(ret, -EINVAL);
	/* A run-time error (not at prepare time) fails too. */
	run("SELECT abs(-9223372036854775807 - 1)", SQLOUT_TABLE, false, &ret);
	CHECK_EQ(ret, -EINVAL);
}

TEST(parse_format)
{
	enum sqlout_format f;

	CHECK_EQ(sqlout__parse_format("csv", &f), 0);
	CHECK_EQ(f, SQLOUT_CSV);
	CHECK_EQ(sqlout__parse_format("json", &f), 0);
	CHECK_EQ(f, SQLOUT_JSON);
	CHECK_EQ(sqlout__parse_format("table", &f), 0);
	CHECK_EQ(f, SQLOUT_TABLE);
	CHECK_EQ(sqlout__parse_format("xml", &f), -EINVAL);
}

TEST_MAIN()
