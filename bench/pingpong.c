// SPDX-License-Identifier: MIT
/*
 * pingpong: two threads hand a token to each other, one way through a pipe, back through a
 * mutex + condition variable, spinning WORK_NS with it: a context-switch-heavy target for the
 * off-CPU benchmark (bench/bench_offcpu.py). Each waits for the token while the other has it
 * (A in a futex wait, B in a pipe read), so each round is a switch of each thread.
 *
 *   pingpong SHMFILE WORK_NS
 *
 * The round count is a uint64_t at offset 0 of SHMFILE (created, 8 bytes), updated every
 * round, for the benchmark to read without disturbing the threads. Runs until killed.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int ab[2];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int token_for_a; /* B's hand-off to A, under mu */
static long work_ns;
static volatile uint64_t *rounds;

static void spin(void)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < work_ns);
}

/* A: works, hands the token to B through the pipe, waits for it on the condition. */
static void *player_a(void *arg)
{
	char c = 0;

	(void)arg;
	for (;;) {
		spin();
		if (write(ab[1], &c, 1) != 1)
			exit(1);
		pthread_mutex_lock(&mu);
		while (!token_for_a)
			pthread_cond_wait(&cv, &mu);
		token_for_a = 0;
		pthread_mutex_unlock(&mu);
		(*rounds)++;
	}
	return NULL;
}

/* B: waits for the token on the pipe, works, hands it back through the condition. */
static void *player_b(void *arg)
{
	char c;

	(void)arg;
	for (;;) {
		if (read(ab[0], &c, 1) != 1)
			exit(1);
		spin();
		pthread_mutex_lock(&mu);
		token_for_a = 1;
		pthread_cond_signal(&cv);
		pthread_mutex_unlock(&mu);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[2];
	int fd;

	if (argc != 3) {
		fprintf(stderr, "usage: pingpong SHMFILE WORK_NS\n");
		return 2;
	}
	work_ns = atol(argv[2]);
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, 8))
		return 1;
	rounds = mmap(NULL, 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (rounds == MAP_FAILED || pipe(ab))
		return 1;
	pthread_create(&t[0], NULL, player_a, NULL);
	pthread_create(&t[1], NULL, player_b, NULL);
	pthread_join(t[0], NULL);
	return 0;
}
