// SPDX-License-Identifier: MIT
/*
 * A C program embedding CPython, for the Python-stack tests: the interpreter lives in a
 * shared libpython, not in the executable.
 *
 *   py_embed_linked SCRIPT ARGS...           linked against libpython3.X.so
 *   py_embed_dlopen LIBPYTHON SCRIPT ARGS... loads LIBPYTHON with dlopen at run time
 *
 * Runs SCRIPT as __main__ (runpy) with sys.argv = [SCRIPT, ARGS...]. With
 * PROBING_EMBED_SPIN=1 in the environment it also starts a native thread named "native-spin"
 * that spins in C and never touches Python (a thread without a thread state). With
 * PROBING_EMBED_KEYS=N it creates N pthread keys before initialising Python, so the
 * interpreter's TSS key lands in glibc's second-level key blocks (key >= 32). With
 * PROBING_EMBED_GATE=1 it prints "gate" and waits for a line on stdin before initialising
 * Python (a process caught while its interpreter is not started yet).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <stdlib.h>

/* The few C-API functions used, declared here so no Python headers are needed. */
typedef void (*init_fn)(int);
typedef int (*run_fn)(const char *);

#ifndef EMBED_DLOPEN
void Py_InitializeEx(int);
int PyRun_SimpleString(const char *);
int Py_FinalizeEx(void);
#endif

static const char code[] = "import os, runpy, sys\n"
			   "n = int(os.environ['PROBING_EMBED_ARGC'])\n"
			   "sys.argv = [os.environ['PROBING_EMBED_ARG%d' % i] for i in range(n)]\n"
			   "runpy.run_path(sys.argv[0], run_name='__main__')\n";

static void *spin(void *arg)
{
	volatile unsigned long n = 0;

	for (;;)
		n++;
	return arg;
}

int main(int argc, char **argv)
{
	init_fn init;
	run_fn run;
	char name[64], num[16];
	int first = 1, i, rc;

#ifdef EMBED_DLOPEN
	void *lib;

	if (argc < 3) {
		fprintf(stderr, "usage: %s LIBPYTHON SCRIPT ARGS...\n", argv[0]);
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
	if (!lib) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	init = (init_fn)dlsym(lib, "Py_InitializeEx");
	run = (run_fn)dlsym(lib, "PyRun_SimpleString");
	if (!init || !run) {
		fprintf(stderr, "libpython lacks the C API\n");
		return 1;
	}
	first = 2;
#else
	if (argc < 2) {
		fprintf(stderr, "usage: %s SCRIPT ARGS...\n", argv[0]);
		return 2;
	}
	init = Py_InitializeEx;
	run = PyRun_SimpleString;
#endif
	for (i = first; i < argc; i++) {
		snprintf(name, sizeof(name), "PROBING_EMBED_ARG%d", i - first);
		setenv(name, argv[i], 1);
	}
	snprintf(num, sizeof(num), "%d", argc - first);
	setenv("PROBING_EMBED_ARGC", num, 1);
	if (getenv("PROBING_EMBED_SPIN")) {
		pthread_t t;

		if (pthread_create(&t, NULL, spin, NULL) == 0)
			pthread_setname_np(t, "native-spin");
	}
	if (getenv("PROBING_EMBED_KEYS")) {
		int nkeys = atoi(getenv("PROBING_EMBED_KEYS"));
		pthread_key_t key;

		for (i = 0; i < nkeys; i++)
			if (pthread_key_create(&key, NULL))
				break;
	}
	if (getenv("PROBING_EMBED_GATE")) {
		char line[16];

		printf("gate\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin)) {
			/* Why, for the test's log: an EINTR here would be probing's fault. */
			fprintf(stderr, "py_embed: no line at the gate: %s\n",
				ferror(stdin) ? strerror(errno) : "end of input");
			return 1;
		}
	}
	init(0);
	rc = run(code);
	return rc ? 1 : 0;
}
