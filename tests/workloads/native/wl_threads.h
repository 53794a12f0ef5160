/* SPDX-License-Identifier: MIT */
/* The two threads of the workloads whose every sample must reach _start (the main thread) or
 * clone3 (the other): plt.c, fpret.c. Include after defining _GNU_SOURCE. */
#ifndef WL_THREADS_H
#define WL_THREADS_H

#include <pthread.h>
#include <stdio.h>

struct wl_thread {
	const char *name;
	void (*loop)(void);
};

static inline void *wl_thread_main(void *arg)
{
	const struct wl_thread *w = arg;

	pthread_setname_np(pthread_self(), w->name);
	puts("ready");
	fflush(stdout);
	w->loop();
	return NULL;
}

/*
 * Run @loop on a thread named @name and on the calling thread at once, and wait for both:
 * the thread prints "ready" once it runs, named. The layout of the workloads whose every
 * sample must reach _start (the main thread) or clone3 (the other).
 */
static inline void wl_two_threads(const char *name, void (*loop)(void))
{
	struct wl_thread w = {name, loop};
	pthread_t t;

	if (pthread_create(&t, NULL, wl_thread_main, &w))
		return;
	loop();
	pthread_join(t, NULL);
}

#endif
