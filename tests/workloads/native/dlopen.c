// SPDX-License-Identifier: MIT
/*
 * Ground truth: spins in before_dlopen() for argv[2] seconds (default 1), then loads
 * libwlplugin.so (path argv[1]) with dlopen and spends argv[3] seconds (default 2) in its
 * plugin_work(), which must be symbolized although the library was not mapped when
 * recording started. With argv[4] "fork", a forked child does all that while the parent
 * waits: the library is mapped in the child only, after the fork.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wl.h"

volatile unsigned long wl_sink;

static double now(void)
{
	return wl_now();
}

__attribute__((noinline)) void before_dlopen(double seconds)
{
	double end = wl_now() + seconds;

	while (wl_now() < end)
		for (int i = 0; i < 10000; i++)
			wl_sink += i;
}

int main(int argc, char **argv)
{
	void (*work)(double, double (*)(void));
	void *h;

	if (argc < 2) {
		fprintf(stderr,
			"usage: dlopen PLUGIN.so [SECONDS_BEFORE [SECONDS_AFTER [fork]]]\n");
		return 2;
	}
	if (argc > 4 && !strcmp(argv[4], "fork")) {
		pid_t pid = fork();
		int status;

		if (pid < 0)
			return 1;
		if (pid > 0) {
			if (waitpid(pid, &status, 0) != pid)
				return 1;
			return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
		}
	}
	before_dlopen(argc > 2 ? atof(argv[2]) : 1);
	h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	work = (void (*)(double, double (*)(void)))dlsym(h, "plugin_work");
	if (!work)
		return 1;
	work(argc > 3 ? atof(argv[3]) : 2, now);
	return 0;
}
