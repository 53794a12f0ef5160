// SPDX-License-Identifier: MIT
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>

#include "record/store.h"
#include "test.h"

static char path[] = "/tmp/probing-test-store-XXXXXX";

static sqlite3 *reopen_file(const char *file)
{
	sqlite3 *db = NULL;

	sqlite3_open_v2(file, &db, SQLITE_OPEN_READONLY, NULL);
	return db;
}

static sqlite3 *reopen(void)
{
	return reopen_file(path);
}

static long long one(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *s;
	long long v = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
		return -2;
	if (sqlite3_step(s) == SQLITE_ROW)
		v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return v;
}

static const char *text(sqlite3 *db, const char *sql, char *buf, size_t n)
{
	sqlite3_stmt *s;

	buf[0] = '\0';
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
		return "(prepare failed)";
	if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
		snprintf(buf, n, "%s", sqlite3_column_text(s, 0));
	sqlite3_finalize(s);
	return buf;
}

TEST(interns_frames_and_stacks_and_aggregates_counts)
{
	struct frame leaf = {.kind = FRAME_NATIVE, .func = "leaf", .module = "/bin/x"};
	struct frame mid = {.kind = FRAME_PYTHON,
			    .func = "run",
			    .qualname = "Job.run",
			    .file = "job.py",
			    .line = 12,
			    .module = "job.py"};
	struct frame root = {.kind = FRAME_NATIVE, .func = "main", .file = "m.c", .line = 3};
	struct frame leaf2 = leaf;
	struct store *st;
	uint64_t a, b, c, a2, s1, s2, s3, ids[3];
	char buf[256], partial[sizeof(path) + 16];
	struct stat sb;
	sqlite3 *db;
	int fd = mkstemp(path);

	REQUIRE(fd >= 0);
	close(fd);
	REQUIRE(store__create(path, 0, &st) == 0);
	snprintf(partial, sizeof(partial), "%s.partial", path);
	CHECK_STR(store__path(st), partial);
	REQUIRE(store__frame_id(st, &leaf, &a) == 0);
	REQUIRE(store__frame_id(st, &mid, &b) == 0);
	REQUIRE(store__frame_id(st, &root, &c) == 0);
	/* Equal content, different pointers: same id. */
	leaf2.func = strdup("leaf");
	REQUIRE(store__frame_id(st, &leaf2, &a2) == 0);
	free((void *)leaf2.func);
	CHECK_EQ(a, a2);
	CHECK(a != b && b != c);
	ids[0] = a, ids[1] = b, ids[2] = c;
	REQUIRE(store__stack_id(st, ids, 3, 0, &s1) == 0);
	REQUIRE(store__stack_id(st, ids, 3, 0, &s2) == 0);
	REQUIRE(store__stack_id(st, ids, 3, STACK_TRUNC_NATIVE, &s3) == 0);
	CHECK_EQ(s1, s2);
	CHECK(s1 != s3);
	store__count(st, 10, 11, s1, 1000, 2);
	store__count(st, 10, 11, s1, 1000, 3);
	store__count(st, 10, 11, s1, 1001, 1);
	store__count(st, 10, 12, s3, 1001, 4);
	store__thread(st, 10, 11, "worker", 1000.5);
	store__thread(st, 10, 11, "renamed", 1002.0);
	store__meta_text(st, "host", "it's");
	REQUIRE(store__flush(st) == 0);
	/* Readable while the writer still has it open; the file it replaces is untouched. */
	CHECK(stat(path, &sb) == 0 && sb.st_size == 0);
	db = reopen_file(partial);
	REQUIRE(db);
	CHECK_EQ(one(db, "SELECT SUM(count) FROM samples"), 10);
	CHECK_EQ(one(db, "SELECT count FROM samples WHERE tid = 11"), 6);
	CHECK_STR(text(db, "SELECT thread FROM samples WHERE tid = 11", buf, sizeof(buf)),
		  "renamed");
	CHECK_EQ(one(db, "SELECT COUNT(*) FROM sample_times"), 3);
	CHECK_EQ(one(db, "SELECT truncated FROM stacks WHERE stack_id = (SELECT stack_id FROM "
			 "samples WHERE tid = 12)"),
		 STACK_TRUNC_NATIVE);
	CHECK_STR(text(db,
		       "SELECT group_concat(func, ';') FROM (SELECT func FROM frames WHERE "
		       "stack_id = (SELECT stack_id FROM samples WHERE tid = 11) ORDER BY depth)",
		       buf, sizeof(buf)),
		  "leaf;run;main");
	CHECK_STR(text(db,
		       "SELECT kind || ':' || qualname || ':' || file || ':' || lineno FROM "
		       "frames WHERE depth = 1 LIMIT 1",
		       buf, sizeof(buf)),
		  "python:Job.run:job.py:12");
	CHECK_EQ(one(db, "SELECT lineno IS NULL AND file IS NULL FROM frames WHERE depth = 0 "
			 "LIMIT 1"),
		 1);
	CHECK_STR(text(db, "SELECT value FROM meta WHERE key = 'host'", buf, sizeof(buf)), "it's");
	CHECK_EQ(one(db, "SELECT first_seen FROM threads WHERE tid = 11"), 1000);
	CHECK_EQ(one(db, "SELECT last_seen FROM threads WHERE tid = 11"), 1002);
	sqlite3_close(db);
	/* A second flush adds; close leaves one file (no WAL) under the final name. */
	store__count(st, 10, 11, s1, 1001, 10);
	REQUIRE(store__close(st) == 0);
	CHECK(access(partial, F_OK) != 0);
	strcat(partial, "-wal");
	CHECK(access(partial, F_OK) != 0);
	db = reopen();
	CHECK_EQ(one(db, "SELECT SUM(count) FROM samples"), 20);
	CHECK_EQ(one(db, "SELECT COUNT(*) FROM frame_defs"), 3);
	CHECK_EQ(one(db, "SELECT COUNT(*) FROM stacks"), 2);
	sqlite3_close(db);
	CHECK(access(path, F_OK) == 0);
	unlink(path);
}

TEST(refuses_unwritable_path)
{
	struct store *st = NULL;

	CHECK(store__create("/nonexistent-dir/x.db", 0, &st) < 0);
	CHECK(st == NULL);
	CHECK_EQ(store__close(NULL), 0);
}

TEST_MAIN()
