/* SPDX-License-Identifier: MIT */
/*
 * store: the recording file (SQLite). Interns frames and stacks, aggregates sample counts per
 * (second, pid, tid, stack) in memory and writes them in one transaction per flush, so the
 * file is a complete, readable database after every flush (WAL mode) even if the recorder is
 * killed. The schema and public views are described in docs/sql.md (docs/design.md §4).
 */
#ifndef PROBING_STORE_H
#define PROBING_STORE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/frame.h"

struct strbuf;

struct store;

/* stacks.truncated bits */
#define STACK_TRUNC_PYTHON 1u /* the Python stack was deeper than --py-depth */
#define STACK_TRUNC_NATIVE 2u /* native unwinding stopped before the outermost frame */

#define STORE_FORCE  1u /* replace a read-only file too (record --force) */
#define STORE_ROTATE 2u /* a store of several files in turn (store__rotate) */

/*
 * Create the recording @path with the schema and views. The data goes to @path.partial (in
 * the directory of what a symbolic link at @path leads to), created anew: an existing
 * .partial file (a killed recorder's data) is never reused. Between flushes it is a complete,
 * readable database in WAL mode. store__close moves it over @path once complete, under the
 * rules of outfile.h: an existing regular file is replaced (read-only only with STORE_FORCE),
 * anything else refused untouched. Return 0 and *@out, or -errno with a message for the user
 * already printed.
 */
int store__create(const char *path, unsigned int flags, struct store **out);

/*
 * Append probing's own definition of the recording view @name (samples, frames,
 * sample_times, collectives, rank_functions, rank_deviation: docs/sql.md), "CREATE VIEW ...;",
 * to @sql. Return 0, -ENOENT when @name is none of them, or -ENOMEM.
 */
int store__view_sql(const char *name, struct strbuf *sql);

/* The file being written (@path.partial). */
const char *store__path(const struct store *st);

/*
 * Write what is pending, checkpoint the WAL into the file and switch it to a single-file
 * (rollback journal) database, then move it over the destination (replacing the side files
 * -wal, -shm, -journal of the file it replaces). NULL is a no-op. Return 0, or -errno with
 * the reason and where the data is (the .partial file) printed.
 */
int store__close(struct store *st);

/* Close and delete the recording being written (it never started). NULL is a no-op. */
void store__discard(struct store *st);

/* Set meta(key, value); text, integer or real. Written at the next flush. */
int store__meta_text(struct store *st, const char *key, const char *value);
int store__meta_int(struct store *st, const char *key, int64_t value);
int store__meta_real(struct store *st, const char *key, double value);

/* A process row; strings are copied. Fields may be NULL / -1 when unknown. */
struct store_process {
	pid_t pid, ppid;
	const char *command; /* command line, arguments separated by spaces */
	const char *exe;
	double start_time;		  /* unix seconds: its fork, or when first seen */
	double end_time;		  /* unix seconds when it exited; 0: not (yet) */
	int rank, local_rank, world_size; /* from RANK / LOCAL_RANK / WORLD_SIZE, -1 if unset */
	const char *python_version;	  /* "3.12.1" or NULL */
	pid_t ns_pid;			  /* its pid in its own PID namespace; 0: the same as pid */
	/* Its job (base/jobinfo.h): the node's rank (GROUP_RANK...), -1 if unknown (not 0!);
	 * the job's id and the host name it sees, NULL if unknown. */
	int group_rank;
	const char *job_id;
	const char *host;
};
int store__process(struct store *st, const struct store_process *p);
/* Record when a process ended (unix seconds). */
int store__process_end(struct store *st, pid_t pid, double end_time);

/* Upsert the thread's name and widen its [first_seen, last_seen] to include @ts (unix s). */
int store__thread(struct store *st, pid_t pid, pid_t tid, const char *name, double ts);
/* Set the thread's tid in its own PID namespace (after store__thread; only where it differs). */
int store__thread_ns_tid(struct store *st, pid_t pid, pid_t tid, pid_t ns_tid);

/*
 * Intern a frame (by content) and return its id in *@id. The frame's strings are copied
 * only when it is new; the caller keeps ownership of @f.
 */
int store__frame_id(struct store *st, const struct frame *f, uint64_t *id);

/*
 * Intern a stack: @ids are frame ids leaf first (depth 0 = leaf), @n of them, with
 * STACK_TRUNC_* @flags. Return its stack id in *@id.
 */
int store__stack_id(struct store *st, const uint64_t *ids, int n, unsigned int flags, uint64_t *id);

/*
 * The sampling frequency: an on-CPU sample stands for 1e9 / @hz nanoseconds of its thread's
 * time (samples.ns). Until set: 99 Hz, record's default.
 */
void store__set_frequency(struct store *st, unsigned int hz);

/*
 * Add @n on-CPU samples of @stack_id for thread @tid of @pid in the second @ts (unix seconds):
 * state 'running', each standing for one sampling period.
 */
int store__count(struct store *st, pid_t pid, pid_t tid, uint64_t stack_id, int64_t ts, uint64_t n);

/*
 * Add @n observations of @stack_id for that thread in @state (enum wait_state, bpf/waitclass.h),
 * standing for @ns nanoseconds of its time: off-CPU time (record --off-cpu).
 */
int store__count_state(struct store *st, pid_t pid, pid_t tid, uint64_t stack_id, int64_t ts,
		       unsigned int state, uint64_t n, uint64_t ns);

/*
 * A row of collectives_raw (the view collectives, docs/sql.md): one collective communication
 * call. Rows are keyed by @id, which the caller chooses: writing the same id again replaces the
 * row (a call is written when it starts and again when it completes). Strings are copied.
 */
struct store_collective {
	int64_t id;
	pid_t pid, tid;
	const char *op;	   /* "allreduce", "broadcast", ... */
	const char *grp;   /* the process group's name, or NULL */
	int64_t bytes;	   /* payload on this rank; -1: unknown */
	int64_t seq;	   /* the call's number in its group; -1: unknown */
	int64_t start_ns;  /* unix ns when this rank entered it */
	int64_t ns;	   /* until it completed on this rank; -1: not (yet) */
	uint64_t stack_id; /* 0: none */
	int grp_rank;	   /* the rank in the group and its size; grp_size <= 0: unknown */
	int grp_size;
	bool has_peer; /* peer and tag are known (send, recv) */
	int peer, tag;
	pid_t worker_tid; /* the thread that completed it; 0: unknown */
	bool error;	  /* it completed with an error */
	const char *lib;  /* "gloo", "nccl" */
};
int store__collective(struct store *st, const struct store_collective *c);

/*
 * Flush, then run @sql on the recording and call @row(@ctx, ncols, values) for each row of
 * its result, values as text (NULL for SQL NULL; at most 16 columns). A non-zero return from
 * @row stops and is returned. Return 0 or -errno.
 */
int store__select(struct store *st, const char *sql,
		  int (*row)(void *ctx, int ncols, const char *const *values), void *ctx);

/* Write everything pending in one transaction. Return 0 or -errno. */
int store__flush(struct store *st);

/*
 * A store created with STORE_ROTATE goes on in a new file: what is pending is written, the
 * file being written is completed and moved to its name (as store__close does), and @path is
 * created as store__create creates its file. Ids (frames, stacks, collectives) go on from
 * where they were, so that the files share one id space: each file holds the frames and
 * stacks its own rows use, written the first time a row of that file uses them, and the
 * meta, processes and threads rows written so far are made again in it (their latest state).
 * Return 0, or -errno with the reason said: the store then writes nothing until a
 * store__rotate succeeds (store__is_open is false), and keeps what is pending.
 */
int store__rotate(struct store *st, const char *path);

/* Does @st have a file to write to (store__rotate may have failed to open one)? */
bool store__is_open(const struct store *st);

struct sqlite3;

/*
 * Into @db (a writable database), the schema of a recording (its tables and views; a meta
 * table unless it has one) and the rows of the recordings @files (@n of them, oldest first:
 * files of one rotating store, which share ids; names or "file:" URIs as ATTACH takes them)
 * from the second @from_ts (unix) on: samples, collectives under way or ended since, the
 * processes and threads, the stacks and frames they use, and the meta keys @db does not have
 * yet. Each file is attached as schema "seg"; @check (may be NULL) is called then, before
 * anything is read from it, and a non-zero return ends the copy with that error. A file
 * that cannot be opened (pruned meanwhile) is skipped. Return 0 or -errno, said.
 */
int store__copy_window(struct sqlite3 *db, const char *const *files, int n, int64_t from_ts,
		       int (*check)(struct sqlite3 *db, const char *file, void *ctx), void *ctx);

#endif
