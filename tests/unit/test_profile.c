// SPDX-License-Identifier: MIT
/*
 * Unit tests: opening recordings (recording.h) and loading them (profile.h), on recordings
 * made with the store API the recorder uses.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "test.h"

#include "report/profile.h"
#include "report/recording.h"
#include "record/store.h"

static char dir[64];

static const char *path(const char *name)
{
	static char buf[128];

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/probing-test-profile-XXXXXX");
		if (!mkdtemp(dir))
			return NULL;
	}
	snprintf(buf, sizeof(buf), "%s/%s", dir, name);
	return buf;
}

/*
 * Two threads of pid 10 and one of pid 20:
 *   10/10 "main":   main;work (app.py:3) x 5 at t=100, x 2 at t=101; main x 1 at t=101
 *   10/11 "worker": main;work (app.py:3) x 4 at t=100
 *   20/20:          main;read;sys_read (kernel) x 3 at t=100
 */
static int make_recording(const char *p)
{
	struct frame fmain = {.kind = FRAME_NATIVE, .func = "main", .module = "/bin/app"};
	struct frame fwork = {.kind = FRAME_PYTHON,
			      .func = "work",
			      .qualname = "W.work",
			      .file = "app.py",
			      .line = 3};
	struct frame fread = {.kind = FRAME_NATIVE, .func = "read", .module = "libc.so.6"};
	struct frame fsys = {.kind = FRAME_KERNEL, .func = "sys_read", .module = "[kernel]"};
	struct store_process proc = {.pid = 10,
				     .ppid = 1,
				     .command = "app --x",
				     .rank = -1,
				     .local_rank = -1,
				     .world_size = -1,
				     .group_rank = -1};
	struct store *st = NULL;
	uint64_t m, w, r, k, s1, s2, s3, ids[3];
	int err;

	err = store__create(p, 0, &st);
	if (err)
		return err;
	err = store__frame_id(st, &fmain, &m) ?: store__frame_id(st, &fwork, &w) ?:
	      store__frame_id(st, &fread, &r) ?: store__frame_id(st, &fsys, &k);
	ids[0] = w, ids[1] = m;
	err = err ?: store__stack_id(st, ids, 2, 0, &s1);
	ids[0] = m;
	err = err ?: store__stack_id(st, ids, 1, 0, &s2);
	ids[0] = k, ids[1] = r, ids[2] = m;
	err = err ?: store__stack_id(st, ids, 3, STACK_TRUNC_NATIVE, &s3);
	err = err ?: store__count(st, 10, 10, s1, 100, 5);
	err = err ?: store__count(st, 10, 10, s1, 101, 2);
	err = err ?: store__count(st, 10, 10, s2, 101, 1);
	err = err ?: store__count(st, 10, 11, s1, 100, 4);
	err = err ?: store__count(st, 20, 20, s3, 100, 3);
	err = err ?: store__thread(st, 10, 10, "main", 100);
	err = err ?: store__thread(st, 10, 11, "worker", 100);
	err = err ?: store__process(st, &proc);
	err = err ?: store__meta_int(st, "frequency", 49);
	err = err ?: store__meta_int(st, "start", 100);
	err = err ?: store__meta_int(st, "duration", 2);
	if (err) {
		store__discard(st);
		return err;
	}
	return store__close(st);
}

static struct profile *load(const char *p, pid_t pid, pid_t tid, unsigned int flags)
{
	struct profile_filter f = {.pid = pid, .tid = tid, .flags = flags};
	struct profile *prof = NULL;
	sqlite3 *db = NULL;

	if (recording__open(p, &db))
		return NULL;
	if (profile__load(db, &f, &prof))
		prof = NULL;
	recording__close(db);
	return prof;
}

TEST(loads_frames_stacks_and_counts)
{
	const char *p = path("a.db");
	struct profile *prof;
	const struct profile_stack *s;
	const struct frame *leaf;
	size_t i;

	REQUIRE(p && make_recording(p) == 0);
	prof = load(p, 0, 0, 0);
	REQUIRE(prof);
	CHECK_EQ(prof->total, 15);
	CHECK_EQ(prof->nframes, 4);
	CHECK_EQ(prof->nstacks, 3);
	CHECK(prof->frequency == 49 && prof->start == 100 && prof->duration == 2);
	/* Summed over seconds: (10,10,s1)=7, (10,10,s2)=1, (10,11,s1)=4, (20,20,s3)=3, sorted. */
	REQUIRE(prof->nsamples == 4);
	CHECK(prof->samples[0].pid == 10 && prof->samples[0].tid == 10);
	CHECK(prof->samples[2].pid == 10 && prof->samples[2].tid == 11);
	CHECK_EQ(prof->samples[2].count, 4);
	CHECK(prof->samples[3].pid == 20 && prof->samples[3].count == 3);
	/* The kernel stack: leaf first, with its flags. */
	s = &prof->stacks[prof->samples[3].stack];
	CHECK_EQ(s->n, 3);
	CHECK_EQ(s->truncated, STACK_TRUNC_NATIVE);
	leaf = &prof->frames[prof->refs[s->first]];
	CHECK_EQ(leaf->kind, FRAME_KERNEL);
	CHECK_STR(leaf->func, "sys_read");
	CHECK_STR(prof->frames[prof->refs[s->first + 2]].func, "main");
	/* Python frame fields survive. */
	for (i = 0; i < prof->nframes; i++) {
		if (prof->frames[i].kind != FRAME_PYTHON)
			continue;
		CHECK_STR(prof->frames[i].qualname, "W.work");
		CHECK_STR(prof->frames[i].file, "app.py");
		CHECK_EQ(prof->frames[i].line, 3);
	}
	CHECK_STR(profile__thread_name(prof, 10, 11), "worker");
	CHECK(profile__thread_name(prof, 20, 20) == NULL);
	CHECK_STR(profile__command(prof, 10), "app --x");
	profile__free(prof);
}

TEST(filters_and_time)
{
	const char *p = path("b.db");
	struct profile *prof;

	REQUIRE(p && make_recording(p) == 0);
	prof = load(p, 10, 0, 0);
	REQUIRE(prof);
	CHECK_EQ(prof->total, 12);
	CHECK_EQ(prof->nsamples, 3);
	profile__free(prof);
	prof = load(p, 0, 11, 0);
	REQUIRE(prof);
	CHECK_EQ(prof->total, 4);
	profile__free(prof);
	prof = load(p, 30, 0, 0);
	REQUIRE(prof);
	CHECK_EQ(prof->total, 0);
	CHECK_EQ(prof->nsamples, 0);
	profile__free(prof);
	/* Per second: thread 10/10 has (100, s1) 5, then at 101 s1 2 and s2 1, in time order. */
	prof = load(p, 10, 10, PROFILE_BY_TIME);
	REQUIRE(prof && prof->nsamples == 3);
	CHECK(prof->samples[0].ts == 100 && prof->samples[0].count == 5);
	CHECK(prof->samples[1].ts == 101 && prof->samples[2].ts == 101);
	CHECK_EQ(prof->samples[1].count + prof->samples[2].count, 3);
	profile__free(prof);
}

static struct profile *load_filter(const char *p, const struct profile_filter *f, int *err)
{
	struct profile *prof = NULL;
	sqlite3 *db = NULL;

	*err = recording__open(p, &db);
	if (*err)
		return NULL;
	*err = profile__load(db, f, &prof);
	recording__close(db);
	return prof;
}

static uint64_t total_of(const char *p, const struct profile_filter *f)
{
	struct profile *prof;
	uint64_t n;
	int err;

	prof = load_filter(p, f, &err);
	if (!prof)
		return UINT64_MAX;
	n = prof->total;
	profile__free(prof);
	return n;
}

static void exec_sql(const char *p, const char *sql)
{
	sqlite3 *db = NULL;

	REQUIRE(sqlite3_open(p, &db) == SQLITE_OK);
	CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(db);
}

/*
 * The recording of make_recording: second 100 has 10/10 5, 10/11 4, 20/20 3 (12 samples),
 * second 101 has 10/10 3; meta start = 100, so these are seconds 0 and 1.
 */
TEST(rank_range_and_state_filters)
{
	const char *p = path("c.db");
	struct profile_filter f = {0};
	struct profile_second *secs = NULL;
	struct profile *prof;
	sqlite3 *db = NULL;
	int64_t t0 = 0;
	size_t n = 0;
	int err;

	REQUIRE(p && make_recording(p) == 0);
	exec_sql(p, "UPDATE processes SET rank = 2 WHERE pid = 10");
	f.flags = PROFILE_RANK;
	f.rank = 2;
	CHECK_EQ(total_of(p, &f), 12);
	f.rank = 0;
	CHECK_EQ(total_of(p, &f), 0);

	/* Time ranges, in seconds since the start: a second that overlaps the range counts. */
	f = (struct profile_filter){.flags = PROFILE_RANGE, .from = 1, .to = 2};
	CHECK_EQ(total_of(p, &f), 3);
	f.from = 0, f.to = 0.5;
	CHECK_EQ(total_of(p, &f), 12);
	f.from = 0.5, f.to = 1.5;
	CHECK_EQ(total_of(p, &f), 15);
	f.from = 2, f.to = 10;
	CHECK_EQ(total_of(p, &f), 0);
	f.pid = 10, f.from = 0, f.to = 1;
	CHECK_EQ(total_of(p, &f), 9);

	/* Samples per second, with the process filter, the range ignored. */
	REQUIRE(recording__open(p, &db) == 0);
	CHECK_EQ(profile__t0(db, &t0), 0);
	CHECK_EQ(t0, 100);
	CHECK_EQ(profile__has_states(db), 0);
	f = (struct profile_filter){.pid = 10, .flags = PROFILE_RANGE, .from = 1, .to = 2};
	REQUIRE(profile__per_second(db, &f, &secs, &n, &t0) == 0);
	REQUIRE(n == 2);
	CHECK(secs[0].t == 0 && secs[0].count == 9);
	CHECK(secs[1].t == 1 && secs[1].count == 3);
	free(secs);
	recording__close(db);

	/* Every row running (on-CPU only): a filter on another state is refused, 'running' is
	 * everything. */
	f = (struct profile_filter){.state = "lock"};
	prof = load_filter(p, &f, &err);
	CHECK(!prof && err == -EINVAL);
	f.state = "running";
	CHECK_EQ(total_of(p, &f), 15);
	/* Off-CPU states: by number (waitclass.h) or by name (other writers). */
	exec_sql(p, "UPDATE sample_counts SET state = 3 WHERE pid = 20;"
		    "UPDATE sample_counts SET state = 'io' WHERE tid = 11;");
	f.state = "lock";
	REQUIRE(recording__open(p, &db) == 0);
	CHECK_EQ(profile__has_states(db), 1);
	recording__close(db);
	CHECK_EQ(total_of(p, &f), 3);
	f.state = "io";
	CHECK_EQ(total_of(p, &f), 4);
	f.state = "running";
	CHECK_EQ(total_of(p, &f), 8);
	f.state = "gil";
	CHECK_EQ(total_of(p, &f), 0);
	f.state = "nonsense";
	prof = load_filter(p, &f, &err);
	CHECK(!prof && err == -EINVAL);
	CHECK_EQ(profile__state_code("lock", &err), 0);
	CHECK_EQ(err, 3);
}

TEST(open_errors)
{
	const char *p;
	sqlite3 *db = NULL;
	int fd;

	CHECK_EQ(recording__open("/nonexistent/probing.db", &db), -ENOENT);
	CHECK_EQ(recording__open("/tmp", &db), -EISDIR);
	p = path("text.db");
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	REQUIRE(fd >= 0);
	CHECK(write(fd, "this is not a database, just some text that is long enough\n", 60) == 60);
	close(fd);
	CHECK_EQ(recording__open(p, &db), -EINVAL);
	p = path("empty.db");
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	REQUIRE(fd >= 0);
	close(fd);
	CHECK_EQ(recording__open(p, &db), -EINVAL);
	/* A SQLite file of another program. */
	p = path("other.db");
	REQUIRE(sqlite3_open(p, &db) == SQLITE_OK);
	CHECK(sqlite3_exec(db, "CREATE TABLE t(a)", NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(db);
	db = NULL;
	CHECK_EQ(recording__open(p, &db), -EPROTO);
	CHECK(db == NULL);
}

TEST(connections_cannot_write)
{
	const char *p = path("c.db");
	sqlite3 *db = NULL;

	REQUIRE(make_recording(p) == 0);
	REQUIRE(recording__open(p, &db) == 0);
	CHECK_EQ(sqlite3_exec(db, "DELETE FROM sample_counts", NULL, NULL, NULL), SQLITE_READONLY);
	CHECK_EQ(sqlite3_exec(db, "CREATE TABLE x(a)", NULL, NULL, NULL), SQLITE_READONLY);
	/* Attaching the same file again does not give a way around it. */
	{
		char *sql = sqlite3_mprintf("ATTACH %Q AS again; DELETE FROM again.meta", p);

		CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK);
		sqlite3_free(sql);
	}
	/* Temporary tables are fine: they live in memory. */
	CHECK_EQ(sqlite3_exec(db, "CREATE TEMP TABLE t AS SELECT 1", NULL, NULL, NULL), SQLITE_OK);
	recording__close(db);
}

static void cleanup_dir(void)
{
	char cmd[128];

	if (dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			fprintf(stderr, "could not remove %s\n", dir);
	}
}

TEST(zz_cleanup)
{
	cleanup_dir();
}

TEST_MAIN()
