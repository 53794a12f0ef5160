/* SPDX-License-Identifier: MIT */
/*
 * pyproc: the CPython interpreter of one target process, read from outside (no ptrace, no
 * stop: process_vm_readv only). Supports the CPython versions pyoffsets/pyoffsets.h names
 * (PY_VERSIONS) on x86_64 (glibc).
 *
 * Per target process:
 *   pp = pyproc__open(pid)                  find the interpreter, its version and layout
 *   pyproc__bpf_cfg(pp, depth, &cfg)        struct py_proc_cfg for the BPF walker (py_procs map)
 *   pyproc__fill_tstates(pp, map_fd)        the BPF fallback map (re-reads the thread states)
 *   pyproc__refresh_threads(pp)             re-read threads, tids and thread names
 *   pyproc__resolve(pp, &rec, &frame)       (code, lasti, checksum) from BPF -> names, line
 *   pyproc__free(pp)
 * Reading stacks without BPF: pyproc__refresh_threads() then pyproc__walk_ex() per thread,
 * and for local variables pyproc__frame_locals() per frame.
 *
 * Not thread-safe: one pyproc is used by one thread at a time.
 */
#ifndef PROBING_PYPROC_H
#define PROBING_PYPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <linux/types.h>

#include "base/frame.h"
#include "bpf/sampler.h"

struct pyproc;

/*
 * Find the CPython interpreter in process @pid: the ELF that defines _PyRuntime among its
 * mappings (a python executable, a shared libpython, an embedding program, a dlopen'ed
 * libpython), its version and struct layout. Returns the object, or NULL with errno:
 *   ENOENT   no CPython interpreter in the process (not Python, or Python 2 / < 3.7 without
 *            _PyRuntime)
 *   ENOTSUP  a CPython we cannot read (version outside PY_VERSIONS, unknown version,
 *            free-threaded build); a warning saying which was printed
 *   ESRCH    no such process;  EACCES/EPERM  not allowed to read it
 * The caller can still record native stacks in the ENOTSUP/ENOENT cases.
 */
struct pyproc *pyproc__open(pid_t pid);

/*
 * Another view of the same interpreter, with caches of its own (pyproc is not thread-safe: one
 * per thread), in process @pid: @pp's own, or a child it forked, which runs the same
 * interpreter at the same addresses until it execs. NULL with errno ENOMEM.
 */
struct pyproc *pyproc__dup(const struct pyproc *pp, pid_t pid);

/* Release everything; every string handed out becomes invalid. NULL is a no-op. */
void pyproc__free(struct pyproc *pp);

/* The printable version, "3.11.7" (or "3.9" when only the minor version is known). */
const char *pyproc__version_str(const struct pyproc *pp);
/* The ELF holding the interpreter (path as /proc/PID/maps lists it) and &_PyRuntime. */
const char *pyproc__elf_path(const struct pyproc *pp);
uint64_t pyproc__runtime_addr(const struct pyproc *pp);

/*
 * The main interpreter's GIL, the struct _gil_runtime_state: [*@lo, *@hi) is its address
 * range. A thread waiting to take the GIL sleeps in futex() on an address inside it (its
 * condition variable or mutex), which tells a GIL wait from every other futex wait
 * (bpf/waitclass.h). Return 0, or -ENOENT when the layout does not say where it is.
 */
int pyproc__gil_range(const struct pyproc *pp, uint64_t *lo, uint64_t *hi);

/*
 * The thread state that holds the GIL right now into *@tstate (0: nobody holds it), read
 * without stopping anything: `locked` and `last_holder`, read again if a hand-over happened
 * while reading (switch_number changed). A thread holds the GIL when its tstate is the one
 * returned. Return 0 or -errno (-EAGAIN: the GIL kept changing hands while read).
 */
int pyproc__gil_holder(struct pyproc *pp, uint64_t *tstate);

/*
 * Fill @cfg for the BPF walker (bpf/pystack.bpf.h) with @max_depth frames (clamped to
 * SAMPLER_MAX_PYDEPTH) and the GIL's address range (pyproc__gil_range; 0, 0 if unknown).
 * Calibrates the pthread TSS layout from the live threads the first time (see
 * pyproc__pthread_specific). Return 0 or -errno.
 */
int pyproc__bpf_cfg(struct pyproc *pp, unsigned int max_depth, struct py_proc_cfg *cfg);

/* ---- threads ------------------------------------------------------------------------------ */

struct pythread {
	uint64_t tstate;  /* PyThreadState * */
	uint64_t interp;  /* PyInterpreterState * */
	uint64_t pthread; /* tstate->thread_id == pthread_self() == fs base */
	pid_t tid;	  /* OS thread id (in the target's pid namespace), 0 if unknown */
	const char *name; /* threading name ("MainThread"), else /proc comm, else "" */
	bool tss_bound;	  /* the TSS key of this thread points at this tstate */
};

/*
 * Re-read every interpreter's thread list, the OS tids and the thread names. Return the
 * number of threads or -errno (-ESRCH: the process is gone). Thread names are interned:
 * they stay valid until pyproc__free.
 */
int pyproc__refresh_threads(struct pyproc *pp);

/* The threads found by the last refresh (valid until the next refresh). */
const struct pythread *pyproc__threads(const struct pyproc *pp, size_t *nr);

/* The thread with OS tid @tid (target namespace) or pthread_t @pthread, or NULL. */
const struct pythread *pyproc__thread_by_tid(const struct pyproc *pp, pid_t tid);
const struct pythread *pyproc__thread_by_pthread(const struct pyproc *pp, uint64_t pthread);

/*
 * Call @cb(@ctx, ns_tid, name) for every thread the interpreters' threading modules list as
 * running (threading._active: Thread._native_id, the tid in the target's own PID namespace,
 * and Thread._name). Lighter than pyproc__refresh_threads (no /proc reads, no thread-state
 * walk), and exact for threads whose pthread_t was reused. @name is valid during the call
 * only. Return the number of threads started but not running yet (threading._limbo: they
 * join _active once they hold the GIL), or -errno: -ESRCH (the process is gone), another
 * (a dict changed while it was read, or the process exec'd): the names given may be partial.
 */
int pyproc__thread_names(struct pyproc *pp, void (*cb)(void *ctx, pid_t ns_tid, const char *name),
			 void *ctx);

/*
 * Put every thread's (pid, pthread_t) -> tstate into the BPF hash map @map_fd (key struct
 * py_tstate_key with pid = @kernel_pid, the tgid as BPF sees it; value __u64), after a
 * re-read of the thread states alone (once where threads keep their state is settled):
 * pyproc__threads may then list them without tids or names (pyproc__refresh_threads
 * reads those). Stale entries of this pid are deleted.
 * Return the number of entries or -errno.
 */
int pyproc__fill_tstates(struct pyproc *pp, int map_fd, __u32 kernel_pid);

/*
 * offsetof(struct pthread, specific_1stblock) in the target's glibc, calibrated from the
 * threads whose TSS slot holds their thread state, or the glibc 2.36 x86_64 default when no
 * thread could confirm it (yet: right after exec the interpreter has not created its key; a
 * later call calibrates again); -1 if the process has no usable TSS key.
 */
int pyproc__pthread_specific(struct pyproc *pp);

/*
 * 3.15+ (no TSS key): where each thread's own thread state is, as an offset from its fs base
 * (a thread-local variable of the interpreter), into *@off, calibrated from the live threads.
 * 0, or -ENOENT (not found: no thread confirms one, or the version has a TSS key).
 */
int pyproc__tls_tstate(struct pyproc *pp, int32_t *off);

/* The interpreter's thread-state TSS key (pthread_key_t), or -1 if not created yet. */
int pyproc__tss_key(struct pyproc *pp);

/*
 * The main thread's pthread_t (_PyRuntime.main_thread: the thread that initialized Python,
 * its threading.main_thread().ident) into *@out. 0, -ENOENT (not set) or -errno.
 */
int pyproc__main_pthread(struct pyproc *pp, uint64_t *out);

/* ---- stacks ------------------------------------------------------------------------------- */

/*
 * Walk the Python frames of the thread whose PyThreadState is at @tstate by the rules of the
 * BPF walker (bpf/pywalk.h, shared): leaf first, code object address, lasti in code units
 * (-1 before the first instruction), PYF_ENTRY and the checksum in meta, shim frames
 * skipped; each frame's address in @frames[i] (a PyFrameObject * up to 3.10, a
 * _PyInterpreterFrame * from 3.11) for pyproc__frame_locals. Writes at most @max records
 * (and at most SAMPLER_MAX_PYDEPTH); @frames may be NULL, otherwise it has room for @max
 * entries. *@truncated says more frames followed. Return the number of records, or -errno:
 *   -EFAULT (or another read error: -ESRCH when the process is gone) a frame could not be
 *           read, or changed under us: the records so far are kept in @out (and @frames),
 *           their count in *@n_partial if not NULL
 *   -EAGAIN the thread was caught entering the eval loop (3.11, 3.12: the chain does not end
 *           at an entry frame, PY_TORN); no records; walk again
 */
int pyproc__walk_ex(struct pyproc *pp, uint64_t tstate, struct py_frame_rec *out, uint64_t *frames,
		    unsigned int max, bool *truncated, unsigned int *n_partial);

/*
 * Resolve one frame record to names and a line: func = co_name, qualname = co_qualname
 * (3.11+; NULL before), file = co_filename, line for rec->lasti, module = the file. Code
 * objects are cached per (address, checksum); a record whose checksum does not match the
 * object now at that address (freed and reused) is not resolved: -ESTALE. Return 0,
 * -ESTALE, -EFAULT (unreadable) or -errno; on failure @out->func is "[unknown]".
 * Strings are owned by @pp and valid until pyproc__free.
 */
int pyproc__resolve(struct pyproc *pp, const struct py_frame_rec *rec, struct frame *out);

/* ---- local variables ---------------------------------------------------------------------- */

/* One local variable of a frame, as pyproc__frame_locals_ex reports it. */
struct pyproc_local {
	const char *name; /* UTF-8 */
	const char *type; /* type(value).__name__: "int", "str", "MyClass"; "?" if unknown */
	const char *repr; /* repr(value) for simple values (see pyproc__frame_locals), or NULL */
	uint64_t addr;	  /* the value's address in the target (a cell's contents, not the cell) */
	unsigned int flags; /* PYL_* */
};

#define PYL_ARG	       0x01 /* a parameter of the function (positional, keyword-only, *, **) */
#define PYL_CELL       0x02 /* a local captured by an inner function (shown: the cell contents) */
#define PYL_FREE       0x04 /* a variable of an enclosing function (shown: the cell contents) */
#define PYL_NAMESPACE  0x08 /* from the frame's locals mapping (PYLOCALS_NAMESPACE) */
#define PYL_UNREADABLE 0x10 /* the value could not be read (freed or changing) */

/* Options of pyproc__frame_locals_ex. */
#define PYLOCALS_NAMESPACE 0x1 /* also the namespace of module-level and class-body frames */

/*
 * The local variables of the frame at @frame running code object @code (from
 * pyproc__walk_ex): for each bound one, @cb(name, type, repr, @ctx), in slot order:
 * parameters first, in their order, then the other locals, cells and free variables (the
 * order of 3.11+'s frame.f_locals). A non-zero return from @cb stops the walk and is
 * returned. Strings are valid during the call only.
 *
 * type is type(value).__name__, repr what repr(value) says for simple values of exactly
 * these types (subclasses excluded: their __repr__ may differ), and NULL for anything else
 * (the "<MyClass object at 0x...>" form is the caller's, with pyproc__frame_locals_ex's
 * address):
 *   None, True, False, Ellipsis, NotImplemented
 *   int                 any size up to about 18000 digits; cut like str beyond @max_repr:
 *                       "123456...(5000 digits)"
 *   float               the shortest round-trip form, as Python writes it ("0.1", "1e+300")
 *   str, bytes          quoted and escaped as repr() does; longer than @max_repr characters:
 *                       the repr of the longest prefix that fits, then "...": 'abc'...
 *   tuple, list, dict, set, frozenset     their length only: "<list of 3>"
 * @max_repr counts characters (code points); at least 16 (PYREPR_MIN) is used.
 *
 * Unbound locals (empty slots, empty cells) are skipped; cells show their contents. A value
 * that cannot be read (the thread runs on and may have freed it) is reported with repr
 * "<unreadable>" (and type "?" when even its type could not be read). Reads are racy by
 * nature; every length and type is checked, so garbage gives errors or "<unreadable>", never
 * a crash or an endless loop.
 *
 * Returns 0; -ESTALE when @frame no longer runs @code (the thread moved on: walk again);
 * -EFAULT when the frame or code object cannot be read; -EINVAL when they do not look like
 * one (garbage); -ESRCH when the process is gone; or what @cb returned.
 */
int pyproc__frame_locals(struct pyproc *pp, uint64_t frame, uint64_t code, size_t max_repr,
			 int (*cb)(const char *name, const char *type, const char *repr, void *ctx),
			 void *ctx);

/*
 * The same with each variable's address and flags (struct pyproc_local). @opts:
 * PYLOCALS_NAMESPACE also reports, for frames whose code is not "optimized" (module level,
 * class bodies, exec()), the entries of the frame's locals mapping — the module's globals
 * for a <module> frame — flagged PYL_NAMESPACE; names starting with "__" and values that are
 * modules, functions, builtins or classes (imports and definitions rather than data) are
 * left out, and at most 1000 entries are read. Without it such frames report nothing but
 * their fast slots (none for a module).
 */
int pyproc__frame_locals_ex(struct pyproc *pp, uint64_t frame, uint64_t code, size_t max_repr,
			    unsigned int opts,
			    int (*cb)(const struct pyproc_local *local, void *ctx), void *ctx);

/* ---- native merge -------------------------------------------------------------------------- */

struct pyproc_range {
	uint64_t start, end; /* [start, end) in the target's address space */
};

/*
 * Where _PyEval_EvalFrameDefault's code lives in the target: the function itself and, where
 * the ELF (or its debug file found by build ID under /usr/lib/debug) has a .symtab, its
 * compiler-split ".cold" part. A native frame whose pc is inside one of these ran the Python
 * frames up to the next PYF_ENTRY (3.11+) or exactly one Python frame (<= 3.10).
 */
const struct pyproc_range *pyproc__eval_ranges(const struct pyproc *pp, size_t *nr);
bool pyproc__in_eval(const struct pyproc *pp, uint64_t pc);

#endif
