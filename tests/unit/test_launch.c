// SPDX-License-Identifier: MIT
/* launch: the command of 'record -- CMD' runs only once released, and not after the end. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "base/procinfo.h"
#include "base/util.h"
#include "record/launch.h"
#include "test.h"

static char dir[] = "/tmp/test_launch.XXXXXX";

static bool exists(const char *path)
{
	struct stat sb;

	return !stat(path, &sb);
}

/* Wait up to 5 s for @path to appear. */
static bool appears(const char *path)
{
	int i;

	for (i = 0; i < 5000 && !exists(path); i++)
		usleep(1000);
	return exists(path);
}

TEST(runs_only_once_released)
{
	struct launch l = LAUNCH_INIT;
	char path[64], *argv[] = {"touch", path, NULL};
	int i;

	snprintf(path, sizeof(path), "%s/ran", dir);
	REQUIRE(launch__start(&l, argv) == 0);
	REQUIRE(l.pid > 0);
	usleep(100 * 1000);
	CHECK(!exists(path)); /* held before exec */
	CHECK(procinfo_alive(l.pid));
	CHECK(!launch__reaped(&l));
	CHECK_EQ(launch__release(&l), 0);
	CHECK(appears(path));
	for (i = 0; i < 5000 && !launch__reaped(&l); i++)
		usleep(1000);
	CHECK_EQ(l.pid, 0);
	launch__end(&l);
	unlink(path);
}

TEST(exec_error_comes_back)
{
	struct launch l = LAUNCH_INIT;
	char *argv[] = {"/no/such/program", NULL};

	REQUIRE(launch__start(&l, argv) == 0);
	CHECK_EQ(launch__release(&l), -ENOENT);
	CHECK_EQ(l.pid, 0); /* reaped */
	CHECK_EQ(l.release, -1);
	CHECK_EQ(l.errfd, -1);
	launch__end(&l);
}

TEST(never_released_never_runs)
{
	struct launch l = LAUNCH_INIT;
	char path[64], *argv[] = {"touch", path, NULL};
	pid_t pid;

	snprintf(path, sizeof(path), "%s/held", dir);
	REQUIRE(launch__start(&l, argv) == 0);
	pid = l.pid;
	launch__end(&l);
	CHECK_EQ(l.pid, 0);
	CHECK_EQ(kill(pid, 0), -1); /* reaped */
	usleep(100 * 1000);
	CHECK(!exists(path));
	launch__end(&l); /* twice is fine */
}

TEST(running_command_ends_with_the_recording)
{
	struct launch l = LAUNCH_INIT;
	char *argv[] = {"sleep", "100", NULL};
	uint64_t t0;
	pid_t pid;

	REQUIRE(launch__start(&l, argv) == 0);
	REQUIRE(launch__release(&l) == 0);
	pid = l.pid;
	t0 = now_mono_ns();
	launch__end(&l);
	CHECK(now_mono_ns() - t0 < 5000000000ULL);
	CHECK_EQ(kill(pid, 0), -1);
}

TEST(cpu_time_of_the_reaped_command)
{
	struct launch l = LAUNCH_INIT;
	char *argv[] = {"sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done", NULL};
	int i;

	REQUIRE(launch__start(&l, argv) == 0);
	REQUIRE(launch__release(&l) == 0);
	for (i = 0; i < 60000 && !launch__reaped(&l); i++)
		usleep(1000);
	CHECK_EQ(l.pid, 0);
	CHECK(l.cpu > 0.01); /* 300000 shell iterations: a good fraction of a second */
	launch__end(&l);
}

__attribute__((constructor(101))) static void make_dir(void)
{
	if (!mkdtemp(dir))
		abort();
}

__attribute__((destructor)) static void remove_dir(void)
{
	rmdir(dir);
}

TEST_MAIN()
