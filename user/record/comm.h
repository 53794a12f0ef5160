/* SPDX-License-Identifier: MIT */
/*
 * comm: the probes on collective communication libraries (bpf/comm.bpf.c). It finds the
 * probe points in each library file a target maps (c10d::ProcessGroupGloo in libtorch*,
 * gloo's completion of unbound buffers in libgloo*, NCCL's C API in libnccl*), from the file's dynamic
 * symbol table, once per build-id; attaches them to that process only (uprobe_multi links,
 * or one perf-event uprobe per point on kernels before 6.6); and says what it could not do
 * as notes (a library without the symbols, a layout it cannot check), never as a failure.
 * The events go into the sampler's ring buffer; user/record/collectives.c makes rows of them.
 */
#ifndef PROBING_RECORD_COMM_H
#define PROBING_RECORD_COMM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/commprobe.h"
#include "record/sampling.h"

struct comm;

struct comm_opts {
	unsigned int stack_size; /* bytes of user stack copied per call (as record --stack-size) */
	bool python;		 /* walk the calling thread's Python frames */
	__u32 pidns_inum;	 /* the PID namespace pids are numbered in; 0: the initial one */
};

/*
 * Load the probes' program, sharing the maps of @s (ring buffer, targets, Python
 * configuration). Return 0 and *@out, or -errno after saying why at -v (record goes on
 * without collectives).
 */
int comm__open(struct sampling *s, const struct comm_opts *o, struct comm **out);

/* Detach everything and free. NULL is a no-op. */
void comm__free(struct comm *c);

/*
 * Whether the kernel tells comm when a target maps a library (COMM_EV_MAPPED): if not, the
 * caller scans its targets now and then (comm__scan).
 */
bool comm__watches_mmap(const struct comm *c);

/*
 * Look at the libraries @pid maps now and attach the probes of each one not yet probed in
 * it. Return the number of libraries newly probed, or -errno (-ESRCH: gone).
 */
int comm__scan(struct comm *c, pid_t pid);

/* @pid maps a library that may have probe points (COMM_EV_MAPPED): scan it now and shortly. */
void comm__mapped(struct comm *c, pid_t pid);

/*
 * @pid starts to be recorded (a new process, an exec, or one the recording started with):
 * scan it now. Without a hook that sees libraries mapped (comm__watches_mmap), a young
 * process loads its libraries in its first seconds (Python imports torch, then calls
 * collectives within a second): it is scanned every 100 ms for its first 20 s, not only at
 * the caller's once-a-second scans.
 */
void comm__started(struct comm *c, pid_t pid);

/*
 * The caller's once-a-second look at @pid, where no hook sees libraries mapped
 * (comm__watches_mmap false; else it does nothing): scan it if its executable mappings
 * grew or shrank since its last scan (/proc/PID/status VmExe + VmLib, which a library
 * mapped with PROT_EXEC changes), or once a minute: reading the maps of every rank every
 * second was a fifth of `probing watch`'s CPU time, every 10 s still 9 %.
 */
void comm__tick(struct comm *c, pid_t pid);

/* Frequent, cheap work: the scans comm__mapped asked for. */
void comm__poll(struct comm *c);

/*
 * Tell the probes the call site @k (bpf/commprobe.h): later calls from it that pass @site's checks
 * send its id instead of a stack copy. 0 or -errno (the calls then go on sending copies).
 */
int comm__site_put(struct comm *c, const struct site_key *k, const struct site_checks *site);

/* @pid exited: detach its probes, forget its call sites and the scans planned for it. */
void comm__forget(struct comm *c, pid_t pid);

/*
 * @pid exec'd at @exec_ns (CLOCK_MONOTONIC; the event is handled late): forget its call
 * sites and the probes attached before @exec_ns (those attached since are the new program's:
 * scans read /proc ahead of the event stream), then start it again as comm__started does.
 */
void comm__exec(struct comm *c, pid_t pid, uint64_t exec_ns);

/*
 * The payload bytes of the call @e on this rank, from its tensors' sizes (checked against
 * the tensor layout of its library, once per library) or NCCL's count and datatype. Return
 * 0 and *@bytes, or -ENOENT when they cannot be told.
 */
int comm__call_bytes(struct comm *c, const struct comm_call_event *e, int64_t *bytes);

/*
 * The rank and size of the process group of the gloo call @e, as the group says at the
 * offsets of its library's torch layout: known by the library's file name, else confirmed on
 * the group of the first call (torchlayout_confirm_group), once per library. Return 0 and
 * *@rank and *@size (0 <= rank < size), or -ENOENT when they cannot be told.
 */
int comm__call_group(struct comm *c, const struct comm_call_event *e, int32_t *rank, int32_t *size);

/* The torch layout of the library of the gloo call @e, or NULL if not known (yet). */
const struct torchlayout *comm__call_layout(const struct comm *c, const struct comm_call_event *e);

/*
 * Whether @func, a native frame's name, is one of NCCL's collective entry points that comm
 * probes (ncclBcast, ncclBroadcast, ...). Newer NCCLs implement one with another (ncclBcast
 * calls ncclBroadcast): a probed call with such a frame among its callers is that same call
 * seen twice.
 */
bool comm__is_nccl_call(const char *func);

/*
 * Process @pid completed a gloo collective. After many with no send/recv, gloo's
 * buffer-completion probes, which fire inside every collective's algorithm and serve only
 * send/recv, are detached from it.
 */
void comm__work_done(struct comm *c, pid_t pid);

/* Process @pid made a gloo send/recv call: its buffer-completion probes are attached again if
 * they were detached. */
void comm__p2p_call(struct comm *c, pid_t pid);

/*
 * Whether @pid's send/recv completions have been watched without a break since @since_ns
 * (CLOCK_TAI if @tai, else CLOCK_MONOTONIC: the clock of the call's event): if not, a call
 * issued then may have completed unseen.
 */
bool comm__p2p_watched(struct comm *c, pid_t pid, uint64_t since_ns, bool tai);

/* What probing noted about the libraries it looked at, "; "-separated, or NULL if nothing. */
const char *comm__notes(const struct comm *c);

struct comm_stats {
	uint64_t processes; /* processes that had probes attached (gone ones too) */
	uint64_t points;    /* probe points attached, over all processes */
	uint64_t lost;	    /* events lost (ring buffer full) */
	/* gloo's buffer-completion probes detached from a process that made no send/recv
	 * (comm__work_done), and attached again at its next one (comm__p2p_call) */
	uint64_t ub_detached, ub_attached_again;
	uint64_t p2p_unwatched; /* send/recv calls stored without their completion: issued
				 * while those probes were not attached (comm__p2p_watched) */
};

void comm__stats(const struct comm *c, struct comm_stats *out);

#endif
