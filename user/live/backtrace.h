/* SPDX-License-Identifier: MIT */
/*
 * backtrace: every thread's current stack of a running process, read from outside (no agent,
 * no injection): Python frames with pyproc (process_vm_readv, the target keeps running) and,
 * if asked, native frames (each thread held still for a moment with ptrace to copy its
 * registers and stack, unwound with libdw like a recorded sample) merged with them.
 */
#ifndef PROBING_BACKTRACE_H
#define PROBING_BACKTRACE_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "base/frame.h"
#include "base/taskwait.h"

struct strbuf;
struct symbolizer;

struct bt_opts {
	bool native;		/* hold each thread to unwind its native stack too */
	bool locals;		/* read the local variables of each Python frame */
	bool waits;		/* each thread's wait (system call, wait channel) and the GIL */
	bool routines;		/* name threads without a name of their own by their routine */
	unsigned int py_depth;	/* Python frames per thread at most */
	unsigned int max_repr;	/* longest repr of a local read from outside (characters) */
	struct symbolizer *sym; /* shared by the processes of a job (NULL: one of its own) */
};

/* One local variable; strings owned by the bt_process. */
struct bt_var {
	char *name;
	char *type;
	char *repr; /* never NULL: "<Foo object at 0x...>" for values not read from outside */
};

/* The local variables of one frame. */
struct bt_vars {
	int n;
	size_t cap; /* room in v */
	struct bt_var *v;
	bool full; /* reprs from the agent (repr() in the process), not read from outside */
};

/* A thread and the GIL (bt_thread.gil). */
enum bt_gil {
	BT_GIL_NA = 0, /* not a thread of the interpreter, or the GIL could not be read */
	BT_GIL_NO,     /* neither holds it nor waits for it */
	BT_GIL_HOLDS,  /* holds it now */
	BT_GIL_WAITS,  /* sleeps waiting to take it */
};

struct bt_thread {
	pid_t tid;
	char name[128];	       /* the name shown: its threading name if the interpreter has one,
			    * else a name it set itself, else what it runs (routine), else comm */
	char comm[16];	       /* its OS name (/proc/PID/task/TID/comm) */
	char routine[128];     /* what it runs (native/threadroutine.h), "" if not known or asked */
	char state;	       /* /proc state letter: R running, S sleeping, D disk wait... */
	struct task_wait wait; /* with opts.waits: its system call and wait channel */
	enum wait_state wclass; /* with opts.waits: why it waits (bpf/waitclass.h) */
	char wait_desc[32];	/* with opts.waits: what it waits in (taskwait_describe), "" */
	enum bt_gil gil;	/* with opts.waits */
	bool python;		/* the interpreter knows this thread */
	bool truncated;		/* more frames than shown */
	int nframes;
	struct frame *frames;	/* innermost first; strings owned by the bt_process */
	struct bt_vars *locals; /* with opts.locals: one per frame (native ones empty) */
	char error[256];	/* why the native stack is missing, if it is */
	char crash[192];	/* in a crash file read back, the thread that crashed: what
				 * happened ("SIGSEGV (code 1, address 0x0)"), else "" */
};

struct bt_process {
	pid_t pid;
	pid_t ppid; /* -1 unknown */
	char *command;
	char python[64];   /* "3.12.1", or "" for a native process */
	char *interpreter; /* the ELF holding it */
	int nthreads;
	struct bt_thread *threads;
	void *priv; /* the caches that own the frames' strings */
};

/*
 * Read every thread's stack of @pid. Return 0 and *@out (free with backtrace__free), or
 * -errno with a message for the user in @why (@whysize bytes), or printed on stderr when @why
 * is NULL: -ESRCH no such process (or it exited meanwhile), -ENOENT not a Python process and
 * no --native, -EPERM not allowed to read it.
 */
int backtrace__collect(pid_t pid, const struct bt_opts *opts, struct bt_process **out, char *why,
		       size_t whysize);

void backtrace__free(struct bt_process *p);

/*
 * Replace the outside-read locals of Python frame @depth (0 = innermost Python frame) of
 * thread @tid by those the agent reported (its answer to a "rows" request of python.locals:
 * {"columns": [...], "rows": [[...], ...]}, columns found by name: tid, depth, func, name,
 * type, repr), for the frames whose function name matches (the thread may have moved on
 * between the two reads). Return the number of frames updated, or -errno (-EPROTO: a column
 * is missing).
 */
int backtrace__use_agent_locals(struct bt_process *p, const char *rows_json);

/* "running", "sleeping", "in uninterruptible wait", "stopped", "zombie", "unknown state". */
const char *backtrace__state_word(char state);

/*
 * What @t waits in, into @buf: "in futex (lock)", "in epoll_wait (io)", "waiting for the GIL";
 * "" for a running thread or when the wait was not read (opts.waits). Returns @buf.
 */
char *backtrace__wait_str(const struct bt_thread *t, char *buf, size_t size);

/*
 * One frame as backtrace__print shows it, indented by 4: "    func (file:line)" for Python,
 * "    func (file:line) [module]" or "    func [module]" for native code; escaped.
 */
void backtrace__print_frame(const struct frame *fr, FILE *f);

/*
 * Give frame @frame of @t (a Python frame) the local variable @name (strings copied; @type and
 * @repr may be NULL: "?"), its repr made in the process (bt_vars.full), as a crash file holds
 * them. Return 0, -EINVAL (no such frame) or -ENOMEM.
 */
int backtrace__add_local(struct bt_thread *t, int frame, const char *name, const char *type,
			 const char *repr);

/* Human-readable, one block per thread (py-spy dump style); a thread that crashed (crash
 * set) says so and where, instead of the state of its signal handler. */
void backtrace__print(const struct bt_process *p, FILE *f);

/*
 * The livedb hook (livedb__set_outside_backtrace): rows [thread, tid, depth, func, file,
 * lineno, kind, qualname] of every thread's Python stack, read from outside, as a JSON array.
 */
int backtrace__json_rows(pid_t pid, struct strbuf *rows);

#endif
