/* SPDX-License-Identifier: MIT */
/*
 * btjob: the backtrace of a job — every thread of several processes (the ranks of a training
 * job and their launcher), read from outside as backtrace.h reads one, then compared:
 * threads whose stacks are identical form one group (the groups of the ranks' main threads
 * first, then largest first), and a rank whose main thread is where no other rank's main
 * thread is gets flagged as the odd one out.
 *
 * Three ways out, the same data in each: text for people (btjob__print), JSON for programs
 * (btjob__json, docs/live.md "backtrace --format json"), and a snapshot file, SQLite
 * (btjob__save; docs/sql.md "Backtrace snapshots"), which btjob__load reads back so that the
 * grouped view, the JSON and SQL work on it later or on another machine.
 */
#ifndef PROBING_BTJOB_H
#define PROBING_BTJOB_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "base/jobinfo.h"
#include "live/backtrace.h"

struct job_procs;
struct strbuf;
struct sqlite3;
struct sqlite3_stmt;

/*
 * Append probing's own definition of the snapshot view @name (bt_stacks, bt_groups: docs/
 * sql.md), "CREATE VIEW ...;", to @sql. Return 0, -ENOENT when @name is neither, or -ENOMEM.
 */
struct strbuf;
int btjob__view_sql(const char *name, struct strbuf *sql);

/* A snapshot's meta 'kind' and 'format' (docs/sql.md). */
#define BTJOB_KIND   "backtrace"
#define BTJOB_FORMAT 1

enum bt_status {
	BT_OK = 0, /* read */
	BT_GONE,   /* it exited before or while it was read */
	BT_ERROR,  /* it could not be read (error says why) */
};

struct bt_job_proc {
	pid_t pid;
	struct job_identity id; /* rank..., host */
	char label[160];	/* "rank 3 (pid 1234)", with " on HOST" when hosts differ */
	enum bt_status status;
	char error[256];       /* why it could not be read (BT_ERROR) */
	struct bt_process *bt; /* its threads (BT_OK), else NULL */
	int *group;	       /* per thread of bt: its group (index into bt_job.groups) */
	bool odd;	       /* the odd one out (see btjob.h) */
};

/* A member of a group: thread @thread of process @proc (indices). */
struct bt_member {
	int proc, thread;
};

/* Threads with identical stacks (or, with no frames at all, the same name). */
struct bt_group {
	int n;
	struct bt_member *m; /* in the job's order of processes and threads */
	bool main;	     /* holds the main thread of a rank (of a process, when no process
			      * has a rank): where the job's own code is */
	bool crashed;	     /* holds a thread that crashed (a crash file: bt_thread.crash) */
};

struct bt_job {
	int nprocs;
	struct bt_job_proc *procs; /* in the order of job_procs (a launcher, then by rank) */
	int ngroups;
	struct bt_group *groups; /* a crashed thread's first, then the main threads'
				  * (bt_group.main), then largest first */
	int odd;		 /* processes flagged as the odd one out */
	double time;		 /* unix seconds it was read */
	char host[65];		 /* the host it was read on ("" unknown) */
	int nhosts;		 /* distinct hosts of the processes */
	bool native;		 /* native frames were read */
	void *priv;		 /* the strings and symbols the frames point to */
};

/*
 * Read every process of @jp (livejob.h) with @o; a process that runs no Python gets its
 * native stacks (as backtrace -p does). A process that exits on the way is BT_GONE, one that
 * cannot be read BT_ERROR: neither is a failure. Then group (btjob__group). Return 0 and
 * *@out (free with btjob__free) or -ENOMEM.
 */
int btjob__collect(const struct job_procs *jp, const struct bt_opts *o, struct bt_job **out);

/* (Re)compute the groups and the odd ones out of @j. Return 0 or -ENOMEM. */
int btjob__group(struct bt_job *j);

/*
 * The grouped view for people: a summary of the job (processes, ranks, threads, groups; those
 * gone or unreadable; the odd one out, or where the ranks' main threads are when they are in
 * different places and none is odd, as with two ranks), then each group once: which ranks and threads share
 * it, their state and wait, and the stack. Text from the targets is escaped.
 */
void btjob__print(const struct bt_job *j, FILE *f);

/*
 * Append the JSON of @j to @out (docs/live.md "backtrace --format json": a list of processes,
 * each with its threads, each with its frames, innermost first). Return 0 or -ENOMEM.
 */
int btjob__json(const struct bt_job *j, struct strbuf *out);

/*
 * Write @j as a snapshot file @path (SQLite, docs/sql.md "Backtrace snapshots"), under the
 * rules of base/outfile.h with @flags (OUTFILE_FORCE...): written beside @path, renamed over
 * it when complete. Return 0 or -errno with what failed printed.
 */
int btjob__save(const struct bt_job *j, const char *path, unsigned int flags);

/*
 * More than a backtrace snapshot in the file (a crash file: live/crashsnap.h): tables of its
 * own beside the snapshot's, filled in the same transaction.
 */
struct btjob_extra {
	const char *what;	/* what the file is, in messages ("crash file"); NULL: snapshot */
	const char *created_by; /* meta created_by; NULL: "probing backtrace" */
	const char *schema;	/* CREATE statements of the extra tables, or NULL */
	/* Fill them (after the snapshot's rows): 0 or -errno. NULL: nothing to fill. */
	int (*write)(struct sqlite3 *db, const struct bt_job *j, void *arg);
	void *arg;
};

/* btjob__save, with @x's extra tables (@x NULL: exactly btjob__save). */
int btjob__save_with(const struct bt_job *j, const char *path, unsigned int flags,
		     const struct btjob_extra *x);

/*
 * For btjob_extra.write: bind @s (NULL: SQL NULL) to parameter @i of @st (a copy is kept),
 * as valid UTF-8 (utf8_repair: what comes from a target may be any bytes).
 */
void btjob__bind_text(struct sqlite3_stmt *st, int i, const char *s);

/* For btjob_extra.write: run the INSERT @st, then reset it and clear its bindings: 0, -EIO. */
int btjob__step(struct sqlite3_stmt *st);

/*
 * Read a snapshot from @db (open, read-only; see report/recording.h) into *@out, grouped.
 * @path names it in messages. Return 0, -EPROTO (not a snapshot, or a format this version
 * does not read: printed) or -errno.
 */
int btjob__load(struct sqlite3 *db, const char *path, struct bt_job **out);

/*
 * Put the local variables of the snapshot open on @db (bt_locals: written for threads read
 * with bt_opts.locals) on the frames of @j, loaded from it (backtrace -i --locals). A
 * snapshot without the table has none. Return 0, -EPROTO (not as probing writes it) or
 * -ENOMEM.
 */
int btjob__load_locals(struct sqlite3 *db, struct bt_job *j);

/* The thread @tid of process @pid (on @host, when @host and the process's host are known) in
 * @j, loaded from a file, and its process's index in *@proc; or NULL. */
struct bt_thread *btjob__thread(struct bt_job *j, const char *host, pid_t pid, pid_t tid,
				int *proc);

void btjob__free(struct bt_job *j);

#endif
