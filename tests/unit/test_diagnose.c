// SPDX-License-Identifier: MIT
/* watch/diagnose: the classic cases of a stalled job, in words. */
#include <signal.h>
#include <string.h>

#include "test.h"
#include "watch/diagnose.h"

#define NOW 1000.0

static struct dg_rank rank_at(int rank, pid_t pid)
{
	struct dg_rank r = {.pid = pid, .rank = rank, .seq = -1, .last_done = NOW - 40};

	snprintf(r.label, sizeof(r.label), "rank %d (pid %d)", rank, pid);
	snprintf(r.func, sizeof(r.func), "backward");
	snprintf(r.file, sizeof(r.file), "/torch/autograd/__init__.py");
	r.line = 197;
	r.state = 'S';
	snprintf(r.wait, sizeof(r.wait), "in futex (lock)");
	return r;
}

static void in_call(struct dg_rank *r, const char *op, int64_t seq, double entered)
{
	r->in_coll = true;
	snprintf(r->op, sizeof(r->op), "%s", op);
	snprintf(r->grp, sizeof(r->grp), "0");
	r->seq = seq;
	r->entered = entered;
}

TEST(one_rank_elsewhere_is_the_culprit)
{
	struct dg_rank r[4];
	struct dg_input in = {.n = 4, .r = r, .now = NOW, .world_size = 4};
	struct dg_result res;
	int i;

	for (i = 0; i < 4; i++)
		r[i] = rank_at(i, 100 + i);
	in_call(&r[0], "allreduce", 1843, NOW - 312);
	in_call(&r[2], "allreduce", 1843, NOW - 311);
	in_call(&r[3], "allreduce", 1843, NOW - 310);
	snprintf(r[1].func, sizeof(r[1].func), "load_shard");
	snprintf(r[1].file, sizeof(r[1].file), "data.py");
	r[1].line = 88;
	r[1].last_done = NOW - 312.4;
	r[1].state = 'R';
	diagnose(&in, &res);
	CHECK_EQ(res.kind, DG_CULPRIT);
	CHECK_EQ(res.culprit, 101);
	CHECK_EQ(res.culprit_rank, 1);
	CHECK(strstr(res.text, "rank 1 (pid 101) has been in load_shard (data.py:88) for 312 s, "
			       "running on a CPU"));
	CHECK(strstr(res.text,
		     "the other 3 ranks wait in allreduce seq 1843 of group 0, entered "
		     "312 s ago: rank 0 (pid 100), rank 2 (pid 102), rank 3 (pid 103)\n"));
}

TEST(different_collectives_are_a_mismatch)
{
	struct dg_rank r[3];
	struct dg_input in = {.n = 3, .r = r, .now = NOW, .world_size = 3};
	struct dg_result res;
	int i;

	for (i = 0; i < 3; i++)
		r[i] = rank_at(i, 200 + i);
	in_call(&r[0], "allreduce", 7, NOW - 50);
	in_call(&r[1], "allreduce", 7, NOW - 50);
	in_call(&r[2], "broadcast", 7, NOW - 49);
	diagnose(&in, &res);
	CHECK_EQ(res.kind, DG_MISMATCH);
	CHECK(strstr(res.text, "a mismatch"));
	CHECK(strstr(res.text, "rank 2 (pid 202) calls broadcast seq 7 of group 0 from"));
	CHECK(strstr(res.text, "2 ranks wait in allreduce seq 7"));
}

TEST(every_rank_here_waiting_points_elsewhere)
{
	struct dg_rank r[2];
	struct dg_input in = {.n = 2, .r = r, .now = NOW, .world_size = 4};
	struct dg_result res;

	r[0] = rank_at(0, 300);
	r[1] = rank_at(1, 301);
	in_call(&r[0], "allreduce", 9, NOW - 20);
	in_call(&r[1], "allreduce", 9, NOW - 20);
	diagnose(&in, &res);
	CHECK_EQ(res.kind, DG_ALL_WAIT);
	CHECK(strstr(res.text, "not on this node (world size 4, 2 here)"));
	in.world_size = 2;
	diagnose(&in, &res);
	CHECK(strstr(res.text, "every rank entered it and none completes"));
}

TEST(a_dead_rank_and_its_signal)
{
	struct dg_rank r[2];
	struct dg_input in = {.n = 2, .r = r, .now = NOW, .world_size = 2};
	struct dg_result res;
	char buf[64];

	r[0] = rank_at(0, 400);
	r[1] = rank_at(1, 401);
	in_call(&r[0], "allreduce", 3, NOW - 2);
	r[1].dead = true;
	r[1].status = SIGSEGV | 0x80;
	r[1].exit_ts = NOW - 2;
	diagnose(&in, &res);
	CHECK_EQ(res.kind, DG_DEAD);
	CHECK_EQ(res.culprit, 401);
	CHECK(strstr(res.text,
		     "rank 1 (pid 401) died: killed by SIGSEGV (core dumped), 2.0 s ago"));
	CHECK(strstr(res.text, "the other 1 rank waits in allreduce seq 3"));
	CHECK_STR(diagnose_exit_str(3 << 8, buf, sizeof(buf)), "exited with status 3");
	CHECK_STR(diagnose_exit_str(0, buf, sizeof(buf)), "exited normally");
	/* A rank that ended normally is no culprit. */
	r[1].status = 0;
	diagnose(&in, &res);
	CHECK(res.kind != DG_DEAD);
}

TEST(the_first_rank_to_die_is_the_culprit)
{
	struct dg_rank r[3];
	struct dg_input in = {.n = 3, .r = r, .now = NOW, .world_size = 3};
	struct dg_result res;

	/* The launcher kills ranks 0 and 1 a second after rank 2's fault. */
	r[0] = rank_at(0, 600);
	r[1] = rank_at(1, 601);
	r[2] = rank_at(2, 602);
	r[0].dead = r[1].dead = r[2].dead = true;
	r[0].status = r[1].status = SIGTERM;
	r[0].exit_ts = r[1].exit_ts = NOW - 1;
	r[2].status = SIGSEGV;
	r[2].exit_ts = NOW - 2;
	diagnose(&in, &res);
	CHECK_EQ(res.kind, DG_DEAD);
	CHECK_EQ(res.culprit, 602);
	CHECK_EQ(res.culprit_rank, 2);
}

TEST(no_collective_anywhere_and_hostile_names)
{
	struct dg_rank r[1];
	struct dg_input in = {.n = 1, .r = r, .now = NOW, .world_size = -1};
	struct dg_result res;

	r[0] = rank_at(0, 500);
	snprintf(r[0].func, sizeof(r[0].func), "evil\x1b[2Jname");
	snprintf(r[0].locals, sizeof(r[0].locals), "s='a\nFAKE LINE'");
	diagnose(&in, &res);
	CHECK_EQ(res.kind, DG_NO_PROGRESS);
	CHECK(!strchr(res.text, '\x1b'));
	CHECK(strstr(res.text, "evil\\x1b[2Jname"));
	/* Its locals on its line, the newline in a repr escaped: two lines in all. */
	CHECK(strstr(res.text, "; its locals there: s='a\\nFAKE LINE'\n"));
	CHECK(!strstr(res.text, "\nFAKE"));
}

TEST_MAIN()
