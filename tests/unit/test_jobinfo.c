// SPDX-License-Identifier: MIT
/* jobinfo against real child processes started with known environments. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/jobinfo.h"
#include "test.h"

/* Start `sleep 30` with environment @env (NULL-terminated); its pid. */
static pid_t spawn_env(char *const env[], pid_t parent_sleeps_child)
{
	char *argv[] = {"/bin/sleep", "30", NULL};
	pid_t pid = fork();

	if (pid == 0) {
		if (parent_sleeps_child) {
			/* A middle process with a child of its own: a job's launcher and a rank. */
			pid_t c = fork();

			if (c == 0)
				execve(argv[0], argv, env);
			execve(argv[0], argv, env);
		}
		execve(argv[0], argv, env);
		_exit(127);
	}
	usleep(100 * 1000); /* let exec happen: /proc/PID/environ is the new image's */
	return pid;
}

static void reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

TEST(torchrun_environment)
{
	char *env[] = {"RANK=3",
		       "LOCAL_RANK=1",
		       "WORLD_SIZE=8",
		       "GROUP_RANK=1",
		       "TORCHELASTIC_RUN_ID=job42",
		       "MASTER_ADDR=10.0.0.1",
		       "MASTER_PORT=29500",
		       NULL};
	struct job_identity j;
	char label[128];
	pid_t pid = spawn_env(env, 0);

	REQUIRE(jobinfo_read(pid, &j) == 0);
	CHECK_EQ(j.rank, 3);
	CHECK_EQ(j.local_rank, 1);
	CHECK_EQ(j.world_size, 8);
	CHECK_EQ(j.group_rank, 1);
	CHECK_EQ(j.master_port, 29500);
	CHECK_STR(j.job_id, "job42");
	CHECK_STR(jobinfo_job_name(&j), "job42");
	CHECK_STR(j.master_addr, "10.0.0.1");
	CHECK_STR(j.launcher, "torchrun");
	CHECK(j.host[0] != '\0');
	CHECK(jobinfo_has_rank(&j));
	snprintf(label, sizeof(label), "rank 3 (pid %d)", (int)pid);
	CHECK_STR(jobinfo_label(&j, pid, false, (char[128]){0}, 128), label);
	jobinfo_free(&j);
	reap(pid);
}

TEST(rank_set_by_a_script_and_torchruns_none)
{
	/* RANK without torchrun's TORCHELASTIC_RUN_ID: set by a script, not torchrun. */
	char *script[] = {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500",
			  NULL};
	/* torchrun without --rdzv_id: its job id is "none", which names no job. */
	char *noid[] = {"RANK=0", "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=none", NULL};
	struct job_identity j;
	pid_t pid;

	pid = spawn_env(script, 0);
	REQUIRE(jobinfo_read(pid, &j) == 0);
	CHECK_EQ(j.rank, 1);
	CHECK(j.launcher == NULL);
	CHECK(jobinfo_job_name(&j) == NULL);
	jobinfo_free(&j);
	reap(pid);

	pid = spawn_env(noid, 0);
	REQUIRE(jobinfo_read(pid, &j) == 0);
	CHECK_STR(j.launcher, "torchrun");
	CHECK_STR(j.job_id, "none");
	CHECK(jobinfo_job_name(&j) == NULL);
	jobinfo_free(&j);
	reap(pid);
}

TEST(slurm_and_mpi_environments)
{
	char *slurm[] = {"SLURM_PROCID=5",
			 "SLURM_LOCALID=2",
			 "SLURM_NTASKS=16",
			 "SLURM_NODEID=3",
			 "SLURM_JOB_ID=777",
			 "SLURM_STEP_ID=0",
			 NULL};
	char *mpi[] = {"OMPI_COMM_WORLD_RANK=7", "OMPI_COMM_WORLD_LOCAL_RANK=3",
		       "OMPI_COMM_WORLD_SIZE=12", NULL};
	char *pmi[] = {"PMI_RANK=9", "PMI_SIZE=10", NULL};
	struct job_identity j;
	pid_t pid;

	pid = spawn_env(slurm, 0);
	REQUIRE(jobinfo_read(pid, &j) == 0);
	CHECK_EQ(j.rank, 5);
	CHECK_EQ(j.local_rank, 2);
	CHECK_EQ(j.world_size, 16);
	CHECK_EQ(j.group_rank, 3);
	CHECK_STR(j.job_id, "777.0");
	CHECK_STR(j.launcher, "slurm");
	jobinfo_free(&j);
	reap(pid);

	pid = spawn_env(mpi, 0);
	REQUIRE(jobinfo_read(pid, &j) == 0);
	CHECK_EQ(j.rank, 7);
	CHECK_EQ(j.local_rank, 3);
	CHECK_EQ(j.world_size, 12);
	CHECK_STR(j.launcher, "mpi");
	jobinfo_free(&j);
	reap(pid);

	pid = spawn_env(pmi, 0);
	REQUIRE(jobinfo_read(pid, &j) == 0);
	CHECK_EQ(j.rank, 9);
	CHECK_EQ(j.world_size, 10);
	CHECK_STR(j.launcher, "pmi");
	jobinfo_free(&j);
	reap(pid);
}

TEST(no_job_and_bad_values)
{
	char *none[] = {"PATH=/bin", NULL};
	char *bad[] = {"RANK=3x", "WORLD_SIZE=-1", "MASTER_PORT=99999999999", NULL};
	struct job_identity j;
	char label[64], want[64];
	pid_t pid;

	pid = spawn_env(none, 0);
	REQUIRE(jobinfo_read(pid, &j) == 0);
	CHECK_EQ(j.rank, -1);
	CHECK(!jobinfo_has_rank(&j));
	CHECK(j.job_id == NULL && j.launcher == NULL);
	snprintf(want, sizeof(want), "pid %d", (int)pid);
	CHECK_STR(jobinfo_label(&j, pid, false, label, sizeof(label)), want);
	jobinfo_free(&j);
	reap(pid);

	pid = spawn_env(bad, 0);
	REQUIRE(jobinfo_read(pid, &j) == 0);
	CHECK_EQ(j.rank, -1);
	CHECK_EQ(j.world_size, -1);
	CHECK_EQ(j.master_port, -1);
	jobinfo_free(&j);
	reap(pid);
}

TEST(gone_process)
{
	struct job_identity j;
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	CHECK_EQ(jobinfo_read(pid, &j), -ESRCH);
}

TEST(descendants_breadth_first)
{
	char *env[] = {"PATH=/bin", NULL};
	pid_t mid = spawn_env(env, 1), *pids = NULL;
	int n = 0, i, found = 0;

	/* us -> mid (sleep) -> its child (sleep) */
	REQUIRE(jobinfo_descendants(getpid(), &pids, &n) == 0);
	CHECK(n >= 3);
	CHECK_EQ(pids[0], getpid());
	for (i = 1; i < n; i++)
		if (pids[i] == mid)
			found = i;
	CHECK(found > 0);
	free(pids);
	REQUIRE(jobinfo_descendants(mid, &pids, &n) == 0);
	CHECK_EQ(n, 2);
	CHECK_EQ(pids[0], mid);
	if (n == 2)
		kill(pids[1], SIGKILL); /* the grandchild */
	free(pids);
	reap(mid);
	CHECK_EQ(jobinfo_descendants(mid, &pids, &n), -ESRCH);
}

TEST_MAIN()
