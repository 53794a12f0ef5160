// SPDX-License-Identifier: MIT
/*
 * injectlib: load any shared library into a process with probing's injector and print what
 * it did (bench/inject.py uses it to time the injector alone).
 *
 *   injectlib PID LIBRARY
 */
#include <stdio.h>
#include <stdlib.h>

#include "injector/inject.h"

int main(int argc, char **argv)
{
	struct inject_info info;
	int err;

	if (argc != 3) {
		fprintf(stderr, "usage: injectlib PID LIBRARY\n");
		return 2;
	}
	err = inject__dlopen(atoi(argv[1]), argv[2], &info);
	if (err) {
		fprintf(stderr, "injectlib: %s\n", info.error);
		return 1;
	}
	printf("handle %#llx thread %d stops %d held %.3f ms total %.3f ms%s\n",
	       (unsigned long long)info.ret, info.tid, info.threads_stopped, info.stopped_ns / 1e6,
	       info.total_ns / 1e6, info.copied ? " (copied)" : "");
	return 0;
}
