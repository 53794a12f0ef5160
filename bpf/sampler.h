/* SPDX-License-Identifier: MIT */
/*
 * What the sampler BPF program (sampler.bpf.c) and userspace (user/record/sampling.c,
 * user/record/recorder.c) share: the per-sample event, the per-process Python configuration
 * and the CPython offsets the BPF frame walker needs. Fixed-width fields only.
 */
#ifndef PROBING_SAMPLER_H
#define PROBING_SAMPLER_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define SAMPLER_MAX_STACK   (64 * 1024) /* largest --stack-size */
#define SAMPLER_MAX_KSTACK  64		/* kernel frames per sample */
#define SAMPLER_MAX_PYDEPTH 1024	/* largest --py-depth */
#define SAMPLER_MAX_CPUS    1024
#define SAMPLER_MAX_TARGETS 16384 /* processes (targets, py_procs), threads (off_threads) */

/* x86_64 user registers, indexed by DWARF register number (what libdw wants). */
enum sample_reg {
	DWREG_RAX = 0,
	DWREG_RDX,
	DWREG_RCX,
	DWREG_RBX,
	DWREG_RSI,
	DWREG_RDI,
	DWREG_RBP,
	DWREG_RSP,
	DWREG_R8,
	DWREG_R9,
	DWREG_R10,
	DWREG_R11,
	DWREG_R12,
	DWREG_R13,
	DWREG_R14,
	DWREG_R15,
	DWREG_RIP,
	DWREG_COUNT
};

/* sample_event.flags */
#define SAMPLE_F_KERNEL_MODE  (1u << 0) /* the sample interrupted kernel code */
#define SAMPLE_F_NO_USER_REGS (1u << 1) /* user registers unavailable (kernel thread) */
#define SAMPLE_F_STACK_SHORT  (1u << 2) /* a read failed: the copy ended before it should */
#define SAMPLE_F_PY_TRUNCATED (1u << 3) /* Python stack deeper than --py-depth */
/*
 * Off-CPU recording (record --off-cpu): the stack of a thread that is off its CPU, taken once
 * per block (its `block` field), not of the task the sample interrupted. Where it was taken:
 * in the sweep, or, with one of these, when the thread was woken, as it resumed or by the
 * recorder's fetcher.
 */
#define SAMPLE_F_OFFCPU	      (1u << 4)
#define SAMPLE_F_OFFCPU_WAKE  (1u << 5) /* in the waker's context (a thread of the process) */
#define SAMPLE_F_OFFCPU_FETCH (1u << 6) /* by the recorder's fetcher (offcpu_fetch.bpf.c) */
/* By the thread itself, as it returned to user mode at the end of the block (a BPF task work
 * the sweep scheduled: sampler.bpf.c, off_resume). */
#define SAMPLE_F_OFFCPU_RESUME (1u << 7)
/* An off-CPU stack at a known site (struct site_checks, map block_sites): no user stack copy
 * follows; its native frames are those of the site `site`. */
#define SAMPLE_F_SITE (1u << 8)

/*
 * Stack sites: native stacks known by where a thread stopped (user/record/stacksites.h). A
 * stack is copied and unwound (in userspace) once per site; later stops at the same site send
 * only their Python frames and the site's id: the collectives' calls (map comm_sites,
 * comm.bpf.c) and the off-CPU blocks (map block_sites, sampler.bpf.c). Unwinding is a function
 * of the registers and the stack words it reads, so userspace, having unwound the first stop,
 * tells BPF which of them decided the native frames (the return addresses, and words and
 * registers that point into the stack: saved frame pointers); a stop whose thread,
 * instruction and stack pointers (the key) and every one of those words and registers (the
 * value's checks) are the same has the same native frames, exactly. Userspace makes sure of
 * the choice before it writes the entry: the unwind, redone with every other word and
 * register replaced by a non-canonical address, must give the same frames.
 */
#define SITE_CHECKS    128
#define SITE_CHECK_REG 0x80000000u /* a check's off: the register DWREG_* (low bits) */

struct site_key {
	__u32 pid, tid; /* as the recorder numbers them */
	__u64 ip;	/* the instruction pointer (regs[DWREG_RIP]) */
	__u64 sp;	/* the stack pointer */
	__u32 variant;	/* which of the place's sites (< SITE_VARIANTS; the collectives' call
			 * sites: 0, one a place, the latest learned) */
	__u32 _pad;	/* 0 */
};

/*
 * Sites kept per place (thread, instruction and stack pointers): a thread can stop at one
 * instruction with one stack pointer from different callers (functions with frames of one size
 * calling the same one, an event loop's two waits); one site a place would be unwound and
 * learned again at each alternation.
 */
#define SITE_VARIANTS 4

struct site_checks {
	__u64 id;		/* userspace's: sent as the event's site */
	__u32 n;		/* checks used */
	__u32 span;		/* bytes from sp that hold every word checked */
	__u32 off[SITE_CHECKS]; /* a word at sp + off, or SITE_CHECK_REG | register */
	__u64 val[SITE_CHECKS]; /* the value it must have */
};

/* sample_event.py_status: what the Python walk found. */
enum py_status {
	PY_NONE = 0,	   /* not a Python process or --no-python */
	PY_OK = 1,	   /* py_len frames (possibly 0: a thread with no Python frames) */
	PY_NO_TSTATE = 2,  /* a Python process, but this thread has no thread state */
	PY_READ_ERROR = 3, /* a read failed part-way: the frames sent are the ones read */
	PY_BAD_TSTATE = 4, /* thread state found but did not validate */
	PY_TORN = 5,	   /* 3.11/3.12: caught mid-way through entering the eval loop (the chain
			    * did not end at an entry frame); no frames sent */
};

/* One Python frame as read by BPF; userspace resolves names and lines. */
struct py_frame_rec {
	__u64 code;  /* PyCodeObject * in the target */
	__s32 lasti; /* instruction index in 16-bit code units; -1 if unknown */
	__u32 meta;  /* bit 0: PYF_ENTRY; bits 1..31: checksum of the code object */
};
#define PYF_ENTRY 1u /* last (outermost) frame run by one C-level eval call */

/* Kinds of ring-buffer records; every record starts with a __u32 type. */
enum event_type {
	EVENT_SAMPLE = 1, /* struct sample_event */
	EVENT_PROC = 2,	  /* struct proc_change_event */
	EVENT_OFFCPU = 3, /* struct offcpu_event */
};

/*
 * Pids and tids in the records are numbered as the recorder's PID namespace numbers them (the
 * namespace of the /proc it reads): the kernel's own numbers when it runs in the initial
 * namespace, the namespace's when it runs inside a container. ns_pid and ns_tid are the
 * numbers in the task's own (innermost) namespace: what the process itself sees as getpid()
 * and gettid(); equal to pid and tid unless the task is in a deeper namespace (a container
 * recorded from the host).
 */

/* A target process changed: it forked a followed child, exec'd, or one of its threads exited. */
enum proc_change {
	PROC_FORK = 1,	      /* pid is a new child of ppid (with --children) */
	PROC_EXEC = 2,	      /* pid replaced its program: drop cached maps and interpreters */
	PROC_EXIT = 3,	      /* thread tid of pid exited, and it was the last: pid ended */
	PROC_THREAD_EXIT = 4, /* thread tid of pid exited; others live on */
};

#define PROC_ARGS_MAX 1024 /* bytes of the command line a PROC_EXEC event carries */
#define PROC_PATH_MAX 256  /* bytes of the exec'd file name */

struct proc_change_event {
	__u32 type;   /* EVENT_PROC */
	__u32 change; /* enum proc_change */
	__u32 pid;
	union {
		__u32 ppid;	 /* PROC_FORK: the parent */
		__u32 exit_code; /* PROC_EXIT: the process's status as wait(2) reports it
				  * (task->exit_code: exit status << 8, or the signal that
				  * killed it, | 0x80 with a core dump) */
	};
	__u64 time_ns;
	__u32 tid;    /* PROC_EXIT, PROC_THREAD_EXIT: the thread that exited */
	__u32 ns_pid; /* pid and tid in the task's own PID namespace */
	__u32 ns_tid;
	__u16 args_len; /* PROC_EXEC: bytes of args used (NUL-separated argv) */
	__u16 flags;	/* PROC_F_* */
	char comm[16];	/* the task's name: at fork the parent's, at exec the new program's, at
			 * exit its last */
};
#define PROC_F_ARGS_TRUNCATED 1 /* the command line was longer than PROC_ARGS_MAX */

/*
 * Map new_children (child tgid -> this): a child a target forked. The forking thread goes on
 * as the child's main thread, so in the child, Python's Thread object for it still holds the
 * forking thread's id (Thread._native_id is not updated at fork).
 */
struct new_child {
	__u32 ppid;	    /* the parent, as the recorder numbers it */
	__u32 fork_ns_tid;  /* the thread that forked, in the parent's own PID namespace */
	__u32 child_ns_pid; /* the child's pid (its main thread's tid) in its own namespace */
};

/* PROC_EXEC records carry the new program's command line and file name. */
struct proc_exec_event {
	struct proc_change_event h;
	char args[PROC_ARGS_MAX];
	char path[PROC_PATH_MAX]; /* the file name given to execve, NUL-terminated */
};

/*
 * One sample. On the wire (ring buffer) the fixed header is followed by py_len
 * struct py_frame_rec (leaf first), then kstack_len __u64 kernel addresses (leaf first), then
 * stack_len bytes of user stack copied from regs[DWREG_RSP] upward. Every part is 8-byte
 * aligned (stack_len is a multiple of 8).
 */
struct sample_event {
	__u32 type; /* EVENT_SAMPLE */
	__u32 pid;  /* tgid */
	__u32 tid;
	__u32 cpu;
	__u64 time_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u32 flags;   /* SAMPLE_F_* */
	__u32 ns_tid;  /* tid in the thread's own PID namespace */
	__u64 regs[DWREG_COUNT];
	__u64 fsbase;	 /* the thread's TLS base (x86_64 fs) */
	__u32 stack_len; /* bytes of user stack that follow */
	__u16 py_len;	 /* Python frames that follow the header */
	__u16 kstack_len;
	__s32 py_status; /* enum py_status */
	__u32 ns_pid;	 /* pid in the process's own PID namespace */
	char comm[16];	 /* the thread's name when it was sampled */
	__u64 block;	 /* SAMPLE_F_OFFCPU: the block (offcpu_event.block) of this stack; an
			  * on-CPU sample with --off-cpu: nvcsw + nivcsw of the thread (its next
			  * block is that + 1); else 0 */
	__u64 site;	 /* SAMPLE_F_SITE: the site (struct site_checks.id) of the native stack */
};

/*
 * Off-CPU time (record --off-cpu). Once per sampling period one CPU's cpu-clock handler sweeps
 * the threads of the targets (map off_threads): a thread on a CPU is left to that CPU's own
 * sample; a thread off its CPU is observed, in a state (enum wait_state, waitclass.h), for the
 * time since the sweep last looked at it. Consecutive observations of one block in one state
 * are summed in the kernel into a segment, sent when the block or the state changes, when the
 * thread is next seen running, and at least once a second while it stays blocked. A block is
 * one stretch off the CPU, numbered by the thread's context switches (nvcsw + nivcsw), which
 * join a segment with the stack taken for the block (SAMPLE_F_OFFCPU).
 */
struct offcpu_event {
	__u32 type; /* EVENT_OFFCPU */
	__u32 pid;  /* tgid */
	__u32 tid;
	__u32 state;   /* enum wait_state */
	__u64 block;   /* nvcsw + nivcsw of the thread while blocked */
	__u64 time_ns; /* the last observation (CLOCK_MONOTONIC) */
	__u64 ns;      /* nanoseconds of the thread's time the observations stand for */
	__u32 observations;
	__u32 ns_tid;  /* tid in the thread's own PID namespace */
	__u64 ip;      /* the thread's user instruction pointer (0: none, a kernel thread) */
	__s64 nr;      /* the system call it waits in; -1 none */
	char comm[16]; /* the thread's name; "" if it is gone */
};

/*
 * Map off_slots: the threads the sweep looks at, and their segments, one slot each (map
 * off_threads: kernel tid -> slot). An array that the sweep walks up to the slots handed out,
 * rather than a hash map, whose walk visits every bucket: ~90 us a sweep for 16384, however
 * few threads there are.
 */
struct off_thread {
	__u32 pid, tid;	      /* as the recorder numbers them */
	__u32 ns_pid, ns_tid; /* in the thread's own PID namespace */
	__u64 last_ns;	      /* when the sweep last looked at it; 0: never */
	__u64 block;	      /* the open segment: its block, */
	__u32 state;	      /* its state, */
	__u32 observations;   /* observations not sent yet */
	__u64 ns;	      /* the nanoseconds they stand for */
	__u64 sent_ns;	      /* when the segment was opened or last sent */
	__u64 stack_block;    /* the block whose stack was taken or asked for */
	__u64 ip;	      /* at the last observation */
	__s64 nr;
	__u32 open;	  /* a segment is open (block and state are valid) */
	__u32 task_state; /* the task's __state when state was classified */
	__u32 quiet;	  /* looks left without the pid lookup (sweep_one) */
	__u32 ktid;	  /* its kernel tid; 0: a free slot */
	/* Where its task_struct was at the last read (no reference held): a quiet look reads
	 * the task there and checks it is the same task, in the same block (sweep_one). */
	__u64 task;
};

/*
 * Where a thread's thread state is (bpf/pystack.bpf.h: py_tss_slot), kept between walks of
 * that thread by a program that has per-thread state: its TLS slot stays where it is for the
 * thread's life while its interpreter lives (the key is made once), and what the slot holds
 * is read and checked at each walk.
 */
struct py_tss_cache {
	__u64 fsbase; /* the thread's TLS base when the slot was found; 0: not found */
	__u64 key;    /* the process's py_proc_cfg tss_key_addr and tls_tstate then */
	__s64 tls;
	__u64 slot;
};

/* Task storage off_want: a block whose stack the sweep could not take; 0: none. */
struct off_want {
	__u64 block;
	/* When the sweep saw block since_block (bpf_ktime_get_ns): it began before. Written
	 * before block, so that a reader that finds since_block == block has its time. */
	__u64 since;
	__u64 since_block;
	/* The thread's voluntary context switches and user instruction and stack pointers when
	 * the sweep saw the block (written before block): the task work (off_resume) takes the
	 * stack only if they are still these, i.e. the thread is returning from that block. */
	__u64 nvcsw;
	__u64 ip, sp;
	/* Where its thread state is, for the task work's walks (its own: no one else writes). */
	struct py_tss_cache tss;
};

/*
 * With the task work, a block is left to the fetcher only once its stack has been wanted this
 * long (the thread has not resumed since: a long block, a hung thread); without it, at once.
 */
#define OFFCPU_FETCH_AFTER_NS 1000000000ULL

/* Blocks left to the fetcher (off_queue) at most at a time: the recorder fetches them every few
 * milliseconds; a block that finds the queue full is asked for again at the next sweep. */
#define OFF_QUEUE_MAX 16384

/* Threads the sweep looks at per period, at most (a round-robin beyond: each thread is then
 * looked at every few periods, its observations weighing the time since the last). */
#define OFFCPU_SWEEP_THREADS 512
/* A quiet thread (blocked, found in the same block at each look) gets a full read after this
 * many looks anyway. */
#define OFFCPU_QUIET_LOOKS 8
/* Off-CPU weights are capped (a stalled sweep must not give a thread a huge observation). */
#define OFFCPU_MAX_WEIGHT_NS 1000000000ULL
/* A segment of a long block is sent at least this often, so that it falls in its second. */
#define OFFCPU_SEND_NS 1000000000ULL
/* Off-CPU stack sites the kernel checks (map block_sites): threads come and go; the recorder
 * keeps as many (user/record/recorder.c) and forgets them all when it needs room. */
#define BLOCK_SITES_MAX 4096

/* Counters in the per-CPU array map `stats` (index = enum sampler_stat). */
enum sampler_stat {
	STAT_SAMPLES = 0,     /* samples of target threads seen by the program */
	STAT_LOST = 1,	      /* samples dropped: ring buffer full */
	STAT_NO_REGS = 2,     /* samples without user registers */
	STAT_LOST_EVENTS = 3, /* process events dropped: ring buffer full */
	STAT_OFF_LOST = 4,    /* off-CPU segments and stacks dropped: ring buffer full */
	STAT_OFF_SWEEPS = 5,  /* sweeps of off-CPU threads */
	STAT_OFF_WANTED = 6,  /* blocks whose stack the sweep left to the wake-up or the fetcher */
	STAT_OFF_NO_ROOM = 7, /* threads not swept: map off_threads full */
	STAT_OFF_RESUME_ERR = 8,  /* task works the sweep could not schedule (off_resume) */
	STAT_OFF_RESUME_MISS = 9, /* task works that found their thread out of the block */
	STAT_OFF_LOOKS = 10,	  /* threads the sweeps looked at */
	STAT_OFF_QUIET = 11,	  /* of them, quiet: counted without reading the task */
	STAT_NR
};

#define SAMPLE_ALIGN8(x) (((x) + 7) & ~7u)

/*
 * CPython layout facts the BPF walker needs. Offsets in bytes; 0xffff = not present in
 * this version. Filled by userspace (pyproc__bpf_cfg) from pyoffsets/ for the target's version.
 */
struct py_bpf_offsets {
	__u16 ts_thread_id;	/* PyThreadState.thread_id (pthread_self()) */
	__u16 ts_native_tid;	/* PyThreadState.native_thread_id (3.11+) */
	__u16 ts_frame;		/* <= 3.10: PyThreadState.frame (PyFrameObject *) */
	__u16 ts_cframe;	/* 3.11, 3.12: PyThreadState.cframe */
	__u16 cframe_current;	/* 3.11, 3.12: _PyCFrame.current_frame */
	__u16 ts_current_frame; /* 3.13+: PyThreadState.current_frame */
	__u16 frame_back;     /* <= 3.10 PyFrameObject.f_back; 3.11+ _PyInterpreterFrame.previous */
	__u16 frame_code;     /* f_code (<= 3.12) or f_executable (3.13; 3.14+ a _PyStackRef) */
	__u16 frame_lasti;    /* <= 3.10 PyFrameObject.f_lasti (int) */
	__u16 frame_instr;    /* 3.11/3.12 prev_instr, 3.13+ instr_ptr (_Py_CODEUNIT *) */
	__u16 frame_owner;    /* 3.12+ _PyInterpreterFrame.owner (char) */
	__u16 frame_is_entry; /* 3.11 _PyInterpreterFrame.is_entry (bool) */
	__u16 code_firstlineno;	   /* PyCodeObject.co_firstlineno (int) */
	__u16 code_name;	   /* PyCodeObject.co_name */
	__u16 code_adaptive;	   /* 3.11+ offsetof(PyCodeObject, co_code_adaptive) */
	__u16 ob_type;		   /* PyObject.ob_type */
	__u16 code_filename;	   /* PyCodeObject.co_filename (part of the checksum) */
	__u16 tss_key;		   /* Py_tss_t._key (pthread_key_t); _is_initialized is at 0 */
	__u16 frame_size;	   /* bytes of a frame read at once: covers every frame field */
	__u16 code_size;	   /* bytes of a code object read at once: ob_type, co_* above */
	__u16 code_firsttraceable; /* 3.13+: PyCodeObject._co_firsttraceable (int) */
	__u16 _pad16;
};

#define PY_OFF_NONE 0xffff
/* Frames whose owner is this or above are no Python frames (3.12+): the entry frame of each
 * _PyEval_EvalFrameDefault call. 3.12, 3.13: FRAME_OWNED_BY_CSTACK = 3, the highest owner;
 * 3.14: FRAME_OWNED_BY_INTERPRETER = 3, FRAME_OWNED_BY_CSTACK = 4; 3.15:
 * FRAME_OWNED_BY_INTERPRETER = 3, the highest (Include/internal/pycore_frame.h,
 * pycore_interpframe_structs.h; CPython 3.14+ tests owner >= FRAME_OWNED_BY_INTERPRETER in
 * _PyFrame_IsIncomplete). */
#define PY_FRAME_OWNED_BY_SHIM 3
#define PY_HDR_MAX	       256 /* largest frame_size / code_size */

/* Per target process (map py_procs, key: tgid). */
struct py_proc_cfg {
	__u16 frames;		/* enum py_frames (pywalk.h): the layout of the frame chain */
	__u16 rules;		/* PY_RULE_* (pywalk.h) */
	__u32 max_depth;	/* frames to walk, <= SAMPLER_MAX_PYDEPTH */
	__u64 tss_key_addr;	/* address of the Py_tss_t holding the thread-state TSS key */
	__u64 code_type_addr;	/* &PyCode_Type, to validate code objects; 0 = skip check */
	__s32 pthread_specific; /* offsetof(struct pthread, specific_1stblock); -1 unknown */
	__s32 tls_tstate;	/* 3.15+: the thread's state is the pointer at fs base + this
				 * (a thread-local of the interpreter); 0: none (TSS key, map) */
	struct py_bpf_offsets off;
	/* [gil_lo, gil_hi): the main interpreter's GIL struct (a futex there is a GIL wait,
	 * waitclass.h); 0, 0 if unknown */
	__u64 gil_lo, gil_hi;
};

/*
 * Whether @cfg lets the walker find thread states: through a TSS key (up to 3.14), or 3.15's
 * thread-local, which can be found only once the interpreter made its first thread state
 * (until then, only through py_tstates).
 */
static inline __attribute__((always_inline)) int py_cfg_settled(const struct py_proc_cfg *cfg)
{
	return cfg->tss_key_addr || cfg->tls_tstate;
}

/*
 * Map py_tstates: the fallback when the TSS lookup finds no valid thread state (a thread
 * whose state is not bound to the TSS key, unknown pthread layout). Userspace fills it
 * (pyproc__fill_tstates) from the interpreters' thread lists. The pid is part of the key
 * because a forked child has the same pthread_t (fs base) values as its parent.
 */
struct py_tstate_key {
	__u32 pid; /* tgid, as the sampler numbers it (the recorder's PID namespace) */
	__u32 _pad;
	__u64 pthread; /* pthread_self() == the thread's fs base on x86_64 glibc */
};

/*
 * The checksum in py_frame_rec.meta (bits 1..31): a mix of a code object's co_name and
 * co_filename (object addresses) and co_firstlineno. BPF computes it from the code object it
 * read at sample time, userspace from the object it reads when resolving; a mismatch means the
 * address was freed and reused by another code object, so the frame is not resolved to the
 * wrong name. Used by both sides: keep it free of anything but fixed-width arithmetic.
 */
static inline __attribute__((always_inline)) __u32 py_code_checksum(__u64 name, __u64 filename,
								    __u32 firstlineno)
{
	__u64 h = name ^ (filename << 1) ^ ((__u64)firstlineno << 40);

	h *= 0x9e3779b97f4a7c15ULL;
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 32;
	return (__u32)h & 0x7fffffffu;
}

#endif
