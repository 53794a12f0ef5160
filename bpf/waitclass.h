/* SPDX-License-Identifier: MIT */
/*
 * Why a thread is off its CPU: one classification shared by the BPF off-CPU recorder and by
 * userspace readers of /proc/PID/task/TID/{stat,syscall,wchan} (backtrace). Fixed-width
 * arithmetic only, so that the BPF verifier and a C compiler accept it alike.
 *
 * The inputs are what the kernel knows of a thread that is not running: its scheduler state,
 * the system call it is in (x86_64 numbers; -1 outside a system call) with its first two
 * arguments, and, for a Python process, where its interpreter's GIL lives: a thread waiting to
 * take the GIL sleeps in futex() on an address inside the GIL's struct (the condition variable
 * or mutex of CPython's _gil_runtime_state, the same layout in 3.8-3.13: docs/design.md).
 */
#ifndef PROBING_WAITCLASS_H
#define PROBING_WAITCLASS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* The states of the samples view (docs/sql.md); values are stored, keep them. */
enum wait_state {
	WAIT_RUNNING = 0,  /* on a CPU */
	WAIT_RUNNABLE = 1, /* ready, waiting for a CPU (preempted, or woken and not yet run) */
	WAIT_SLEEP = 2,	   /* asleep by request: nanosleep, select/poll without descriptors */
	WAIT_LOCK = 3,	   /* futex: mutexes, conditions, semaphores, Event.wait, queue.get */
	WAIT_IO = 4,	   /* read/write/recv/send/poll/epoll/select on descriptors, disk waits */
	WAIT_GIL = 5,	   /* waiting to take the Python GIL */
	WAIT_OTHER = 6,	   /* anything else: wait4 on a child, rt_sigtimedwait, unknown */
	WAIT_NR
};

/* wait_input.flags */
#define WAITIN_ON_CPU	   (1u << 0) /* the thread is running on a CPU right now */
#define WAITIN_DISK_KSTACK (1u << 1) /* its kernel stack or wait channel is a disk/page wait */

/* wait_input.state: the low bits of task_struct.__state (include/linux/sched.h). */
#define WAIT_TASK_RUNNING	  0x0000
#define WAIT_TASK_INTERRUPTIBLE	  0x0001
#define WAIT_TASK_UNINTERRUPTIBLE 0x0002

struct wait_input {
	__s64 nr;     /* system call in flight (x86_64 number), -1 if none */
	__u64 arg0;   /* its first argument (futex: the address) */
	__u64 arg1;   /* its second (poll/ppoll: nfds) */
	__u32 state;  /* WAIT_TASK_* bits */
	__u32 flags;  /* WAITIN_* */
	__u64 gil_lo; /* [gil_lo, gil_hi): the GIL struct of the thread's interpreter; 0, 0 */
	__u64 gil_hi; /* when not a Python process */
};

/* x86_64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl). */
#define WAIT_NR_READ		0
#define WAIT_NR_WRITE		1
#define WAIT_NR_POLL		7
#define WAIT_NR_PREAD64		17
#define WAIT_NR_PWRITE64	18
#define WAIT_NR_READV		19
#define WAIT_NR_WRITEV		20
#define WAIT_NR_SELECT		23
#define WAIT_NR_MSYNC		26
#define WAIT_NR_PAUSE		34
#define WAIT_NR_NANOSLEEP	35
#define WAIT_NR_SENDFILE	40
#define WAIT_NR_CONNECT		42
#define WAIT_NR_ACCEPT		43
#define WAIT_NR_SENDTO		44
#define WAIT_NR_RECVFROM	45
#define WAIT_NR_SENDMSG		46
#define WAIT_NR_RECVMSG		47
#define WAIT_NR_FSYNC		74
#define WAIT_NR_FDATASYNC	75
#define WAIT_NR_FUTEX		202
#define WAIT_NR_IO_GETEVENTS	208
#define WAIT_NR_CLOCK_NANOSLEEP 230
#define WAIT_NR_EPOLL_WAIT	232
#define WAIT_NR_OPENAT		257
#define WAIT_NR_PSELECT6	270
#define WAIT_NR_PPOLL		271
#define WAIT_NR_SPLICE		275
#define WAIT_NR_SYNC_FILE_RANGE 277
#define WAIT_NR_EPOLL_PWAIT	281
#define WAIT_NR_ACCEPT4		288
#define WAIT_NR_PREADV		295
#define WAIT_NR_PWRITEV		296
#define WAIT_NR_RECVMMSG	299
#define WAIT_NR_SENDMMSG	307
#define WAIT_NR_PREADV2		327
#define WAIT_NR_PWRITEV2	328
#define WAIT_NR_IO_URING_ENTER	426
#define WAIT_NR_EPOLL_PWAIT2	441
#define WAIT_NR_FUTEX_WAITV	449

/* Does system call @nr wait on descriptors (sockets, pipes, files, event loops)? */
static inline __attribute__((always_inline)) int wait_nr_is_io(__s64 nr)
{
	switch (nr) {
	case WAIT_NR_READ:
	case WAIT_NR_WRITE:
	case WAIT_NR_PREAD64:
	case WAIT_NR_PWRITE64:
	case WAIT_NR_READV:
	case WAIT_NR_WRITEV:
	case WAIT_NR_MSYNC:
	case WAIT_NR_SENDFILE:
	case WAIT_NR_CONNECT:
	case WAIT_NR_ACCEPT:
	case WAIT_NR_SENDTO:
	case WAIT_NR_RECVFROM:
	case WAIT_NR_SENDMSG:
	case WAIT_NR_RECVMSG:
	case WAIT_NR_FSYNC:
	case WAIT_NR_FDATASYNC:
	case WAIT_NR_IO_GETEVENTS:
	case WAIT_NR_EPOLL_WAIT:
	case WAIT_NR_OPENAT:
	case WAIT_NR_SPLICE:
	case WAIT_NR_SYNC_FILE_RANGE:
	case WAIT_NR_EPOLL_PWAIT:
	case WAIT_NR_ACCEPT4:
	case WAIT_NR_PREADV:
	case WAIT_NR_PWRITEV:
	case WAIT_NR_RECVMMSG:
	case WAIT_NR_SENDMMSG:
	case WAIT_NR_PREADV2:
	case WAIT_NR_PWRITEV2:
	case WAIT_NR_IO_URING_ENTER:
	case WAIT_NR_EPOLL_PWAIT2:
		return 1;
	default:
		return 0;
	}
}

/*
 * Classify one thread; the first rule that matches wins:
 *   on a CPU -> running; scheduler state RUNNING but off the CPU -> runnable (preempted, or
 *   woken and waiting for a CPU: a thread on its way out of a finished system call still shows
 *   that call's number, so this comes before the system call); futex on the GIL -> gil;
 *   any other futex -> lock; nanosleep, pause, select/poll without descriptors -> sleep;
 *   descriptor I/O (select/poll with descriptors included) -> io; no system call but an
 *   uninterruptible wait, or a disk wait seen on the kernel stack -> io; else other.
 */
static inline __attribute__((always_inline)) enum wait_state
wait_classify(const struct wait_input *in)
{
	__s64 nr = in->nr;

	if (in->flags & WAITIN_ON_CPU)
		return WAIT_RUNNING;
	if ((in->state & 0xff) == WAIT_TASK_RUNNING)
		return WAIT_RUNNABLE;
	if (nr == WAIT_NR_FUTEX && in->arg0 >= in->gil_lo && in->arg0 < in->gil_hi)
		return WAIT_GIL;
	if (nr == WAIT_NR_FUTEX || nr == WAIT_NR_FUTEX_WAITV)
		return WAIT_LOCK;
	if (nr == WAIT_NR_NANOSLEEP || nr == WAIT_NR_CLOCK_NANOSLEEP || nr == WAIT_NR_PAUSE)
		return WAIT_SLEEP;
	if (nr == WAIT_NR_SELECT || nr == WAIT_NR_PSELECT6)
		return in->arg0 ? WAIT_IO : WAIT_SLEEP; /* nfds */
	if (nr == WAIT_NR_POLL || nr == WAIT_NR_PPOLL)
		return in->arg1 ? WAIT_IO : WAIT_SLEEP; /* nfds */
	if (wait_nr_is_io(nr))
		return WAIT_IO;
	if (in->flags & WAITIN_DISK_KSTACK)
		return WAIT_IO;
	if (nr < 0 && (in->state & WAIT_TASK_UNINTERRUPTIBLE))
		return WAIT_IO; /* a page fault waiting for the disk */
	return WAIT_OTHER;
}

/* The name of @s as stored in the samples view's `state` column. */
static inline const char *wait_state_name(enum wait_state s)
{
	switch (s) {
	case WAIT_RUNNING:
		return "running";
	case WAIT_RUNNABLE:
		return "runnable";
	case WAIT_SLEEP:
		return "sleep";
	case WAIT_LOCK:
		return "lock";
	case WAIT_IO:
		return "io";
	case WAIT_GIL:
		return "gil";
	default:
		return "other";
	}
}

#endif
