/* SPDX-License-Identifier: MIT */
/*
 * sampling: loads bpf/sampler.bpf.c, opens one cpu-clock perf event per online CPU, attaches
 * the program and the process tracepoints, and hands ring-buffer records to a callback.
 */
#ifndef PROBING_SAMPLING_H
#define PROBING_SAMPLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/sampler.h"

struct sampling;

struct sampling_opts {
	unsigned int freq;	 /* samples per second per CPU */
	unsigned int stack_size; /* bytes of user stack per sample (8 KiB .. 64 KiB) */
	bool kernel;		 /* also kernel stacks */
	bool python;		 /* walk Python frames where configured */
	bool children;		 /* follow new child processes of targets */
	__u32 pidns_inum;	 /* the PID namespace pids are numbered in; 0: the initial one */
	size_t ringbuf_bytes;	 /* ring buffer size (power of two); 0 = default */
};

/* Highest -F accepted, whatever the kernel allows (perf_event_max_sample_rate may be lower). */
#define SAMPLER_MAX_FREQ 10000

/*
 * Open, configure, load and attach. Return 0 and *@out, or -errno after printing what went
 * wrong and what to do (missing privileges, kernel without BPF, ...).
 */
int sampling__open(const struct sampling_opts *opts, struct sampling **out);

/* Detach everything and free. NULL is a no-op. */
void sampling__free(struct sampling *s);

/* Start or stop sampling process @pid (all its threads). 0 or -errno. */
int sampling__add_target(struct sampling *s, pid_t pid);
int sampling__remove_target(struct sampling *s, pid_t pid);

/* Set (or, with @cfg NULL, clear) the Python walk configuration of @pid. 0 or -errno. */
int sampling__set_python(struct sampling *s, pid_t pid, const struct py_proc_cfg *cfg);

/* File descriptor of the BPF map called @name (e.g. "py_tstates"), or -ENOENT. */
int sampling__map_fd(struct sampling *s, const char *name);

/*
 * Call @cb(ctx, data, len) for each record waiting in the ring buffer (struct sample_event
 * or struct proc_change_event; data is valid only during the call). Return the number of
 * records consumed or -errno; a negative return from @cb stops and is returned.
 */
int sampling__consume(struct sampling *s, int (*cb)(void *ctx, void *data, size_t len), void *ctx);

/*
 * Wait until records are likely waiting (up to @timeout_ms). Samples do not wake the
 * reader (cheaper for the target), so this mostly sleeps; process events do wake it.
 */
int sampling__wait(struct sampling *s, int timeout_ms);

/* Totals since open: samples the program saw for targets and samples lost (ring full). */
void sampling__stats(struct sampling *s, uint64_t *samples, uint64_t *lost);

/* Process events (fork, exec, exit) dropped since open because the ring buffer was full. */
uint64_t sampling__lost_events(struct sampling *s);

/*
 * The kernel's own accounting of the sampling program: total run time in ns and number of
 * runs (every perf-event sample on the machine, targets or not). Both 0 unless
 * kernel.bpf_stats_enabled is 1. Return 0 or -errno.
 */
int sampling__prog_stats(struct sampling *s, uint64_t *run_ns, uint64_t *runs);

#endif
