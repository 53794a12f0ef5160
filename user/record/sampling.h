/* SPDX-License-Identifier: MIT */
/*
 * sampling: loads bpf/sampler.bpf.c, opens one cpu-clock perf event per online CPU, attaches
 * the program and the process tracepoints, and hands ring-buffer records to a callback. With
 * off_cpu it also attaches the off-CPU sweep (a second cpu-clock event per CPU), the wake-up
 * hook, and loads bpf/offcpu_fetch.bpf.c, the program that fetches stacks of blocked threads.
 */
#ifndef PROBING_SAMPLING_H
#define PROBING_SAMPLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/sampler.h"

struct bpf_map;
struct sampling;

struct sampling_opts {
	unsigned int freq;	 /* samples per second per CPU */
	unsigned int stack_size; /* bytes of user stack per sample (8 KiB .. 64 KiB) */
	bool kernel;		 /* also kernel stacks */
	bool python;		 /* walk Python frames where configured */
	bool children;		 /* follow new child processes of targets */
	bool off_cpu;		 /* also off-CPU time: the sweep, its stacks (sampler.h) */
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

struct pyproc;

/*
 * Hand the walker @pid's interpreter @pp: its configuration @cfg (pyproc__bpf_cfg), then its
 * thread states (py_tstates, pyproc__fill_tstates). 0 or -errno (nothing was set up).
 */
int sampling__use_python(struct sampling *s, pid_t pid, struct pyproc *pp,
			 const struct py_proc_cfg *cfg);

/*
 * Off-CPU recording (opts.off_cpu), in order of use. sampling__add_target registers the
 * target's threads with the sweep (new ones register themselves).
 *
 * sampling__offcpu_fetch_due: run the stack fetcher if it has work: blocks left to it since
 * its last run (their stacks could not be taken in the sweep), or, where threads give their
 * blocks' stacks as they resume (a task work), blocks wanted for OFFCPU_FETCH_AFTER_NS (a
 * block that lasts, a hung thread; the fetcher leaves younger ones in the queue). It takes the
 * stacks of the queued threads' blocks still going on, in every target, and sends them as
 * records (SAMPLE_F_OFFCPU_FETCH): one system call (its syscall program), or where the kernel
 * refuses that program, a task iterator per target. Cheap when there is no work (counters in
 * mmap'ed memory): the reader thread (evqueue.c) calls it at each turn, so that blocks are
 * taken while they last even when the consumer is slow. Thread-safe (one run at a time).
 * 0 or -errno.
 * sampling__offcpu_stop: no more sweeps (the end of recording); what they sent before is in
 * the ring buffer; every block left in the fetcher's queue is due and fetched. 0 or -errno
 * (of the fetcher).
 * sampling__offcpu_flush: after that, send every segment the threads had not sent yet through
 * the ring buffer (struct offcpu_event, as the sweep sends them), for the reader's last drain.
 * 0 or -errno.
 */
int sampling__offcpu_fetch_due(struct sampling *s);
int sampling__offcpu_stop(struct sampling *s);
int sampling__offcpu_flush(struct sampling *s);

/* What off-CPU recording counted since open. */
struct sampling_offcpu_stats {
	uint64_t sweeps;     /* sweeps of the targets' threads */
	uint64_t looks;	     /* threads they looked at */
	uint64_t quiet;	     /* of them, blocked and not woken since: not read again */
	uint64_t wanted;     /* blocks whose stack was left to the wake-up or the fetcher */
	uint64_t fetched;    /* stacks the fetcher sent */
	uint64_t torn;	     /* stacks the fetcher dropped: the thread ran while read */
	uint64_t lost;	     /* segments and stacks lost: the ring buffer was full */
	uint64_t no_room;    /* threads the sweep could not take: too many threads */
	uint64_t fetch_runs; /* fetcher runs */
	/* Code objects' headers the fetcher's Python walks took from what it had read before
	 * (bpf/pystack.bpf.h, py_code_cache), and those it read */
	uint64_t code_cached, code_read;
	uint64_t page_frames; /* frames the fetcher copied from its copy of the leaf's page */
	uint64_t resume_err;  /* task works the sweep could not schedule */
	uint64_t resume_miss; /* task works that found their thread out of its block */
	uint64_t resume_runs, resume_ns; /* task works run, and their time in the threads */
	uint64_t resume_page_frames;	 /* frames their walks copied from the leaf's page */
};
void sampling__offcpu_stats(struct sampling *s, struct sampling_offcpu_stats *out);

/*
 * Tell the off-CPU stacks the site @k (sampler.h: struct site_key): later blocks of that thread
 * there that pass @site's checks, taken where the thread's memory is loaded, send its id
 * instead of a stack copy (SAMPLE_F_SITE). 0 or -errno (they then go on sending copies).
 */
int sampling__block_site_put(struct sampling *s, const struct site_key *k,
			     const struct site_checks *site);

/* Stop using the site @k (its id is no longer known). */
void sampling__block_site_drop(struct sampling *s, const struct site_key *k);

/* Drop the sites of process @pid (it exited or exec'd: a later process may get its pid), or
 * every site if @pid is 0. */
void sampling__block_sites_forget(struct sampling *s, pid_t pid);

/*
 * Delete from the BPF hash map @m, keyed by struct site_key, the sites of process @pid, or
 * every site if @pid is 0 (comm's call sites, the off-CPU blocks' sites).
 */
void site_map__forget(struct bpf_map *m, pid_t pid);

/* The map py_tstates (pthread -> PyThreadState, bpf/pystack.bpf.h), which the recorder fills
 * for the Python walk's fallback: its file descriptor. */
int sampling__tstates_fd(struct sampling *s);

/* The options @s was opened with (what the samples hold). */
const struct sampling_opts *sampling__opts(const struct sampling *s);

/* The maps thread_births and new_children (sampler.h), which threadnames.c reads: their file
 * descriptors, the sampler's count of their changes (memory the kernel updates, valid as long
 * as @s) and the ring buffer births_wake, written with a wake-up after each change. */
void sampling__thread_maps(struct sampling *s, int *births_fd, int *children_fd,
			   const uint64_t **changes, int *wake_rb_fd);

struct bpf_object;

/*
 * Give the BPF object @obj, opened and not loaded yet, the sampler's own maps in place of its
 * copies of them: those of bpf/shared_maps.bpf.h and pystack.bpf.h's py_tstates, each that
 * @obj has (comm.bpf.c, offcpu_fetch.bpf.c). 0 or -errno.
 */
int sampling__share_maps(struct sampling *s, struct bpf_object *obj);

/*
 * Call @cb(ctx, data, len) for each record waiting in the ring buffer (struct sample_event
 * or struct proc_change_event; data is valid only during the call). Return the number of
 * records consumed or -errno; a negative return from @cb stops and is returned.
 */
int sampling__consume(struct sampling *s, int (*cb)(void *ctx, void *data, size_t len), void *ctx);

/*
 * Wait until records are likely waiting, or @also_fd (-1: none) is readable, up to
 * @timeout_ms. Records do not wake the reader (cheaper for the target) until the buffer is
 * an eighth full, so this mostly sleeps; process exits do wake it. Return > 0 if something
 * is ready, 0 on time-out, or -errno.
 */
int sampling__wait(struct sampling *s, int also_fd, int timeout_ms);

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
