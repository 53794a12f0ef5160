/* SPDX-License-Identifier: MIT */
/*
 * threadroutine: what a thread runs, named from outside without stopping it, for threads
 * that have no name of their own (gloo's and the TCPStore's threads all show their process's
 * name): the function glibc started it with (pthread_create's start_routine), or, for a
 * std::thread, the callable it was given (std::thread stores it in a _State_impl object whose
 * RTTI name says its type; a pointer to member function or a function pointer stored in it
 * is named by its symbol).
 *
 * Where things are comes from the target's own glibc: its thread_db descriptors
 * (_thread_db_pthread_tid, _thread_db_pthread_start_routine, ... in libc's .dynsym: offsets
 * in struct pthread), and ld.so's thread lists (_rtld_global._dl_stack_used and
 * _dl_stack_user, glibc >= 2.34) for a thread whose struct pthread (its fs base) is not
 * known. Everything read is the target's data: pointers are checked against its mappings,
 * strings are bounded, and a struct pthread is used only if its tid field is the thread's.
 */
#ifndef PROBING_THREADROUTINE_H
#define PROBING_THREADROUTINE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/procmaps.h"

struct dwproc;
struct symbolizer;

/* glibc's layout of struct pthread in one process, and where its thread lists are. */
struct pthread_layout {
	uint32_t off_list;     /* struct pthread: the list_t linking it into a thread list */
	uint32_t off_tid;      /* its tid (in the target's PID namespace) */
	uint32_t off_start;    /* start_routine; arg follows it (nptl/descr.h) */
	uint64_t heads[2];     /* _dl_stack_used, _dl_stack_user (list heads); 0 if unknown */
	struct procmaps maps;  /* the process's maps (code addresses are checked against them) */
	uint64_t maps_read_ns; /* when (monotonic): re-read at most every 100 ms */
};

/*
 * Read the layout of process @pid from its libc (and libpthread, older glibc) and ld.so.
 * Return 0, -ENOTSUP (no glibc thread_db descriptors: musl, a static program), -ESRCH or
 * another -errno. Release with pthread_layout__release (also after a failure).
 */
int pthread_layout__read(pid_t pid, struct pthread_layout *out);

/* Free what the layout holds. */
void pthread_layout__release(struct pthread_layout *l);

/* One thread of glibc's lists: its tid (target namespace) and struct pthread address. */
struct pthread_entry {
	pid_t tid;
	uint64_t pd;
};

/*
 * Every thread glibc lists in @pid (main thread included) into *@out (malloc'd, *@n
 * entries). Read without stopping the process, so a thread being created or exiting may be
 * missing. Return 0, -ENOENT (the lists are not known: glibc < 2.34) or -errno.
 */
int pthread_layout__threads(pid_t pid, const struct pthread_layout *l, struct pthread_entry **out,
			    int *n);

/*
 * Name what thread @ns_tid (its id in @pid's own PID namespace) runs, from its struct
 * pthread at @pd (its fs base): "gloo::transport::tcp::Loop::run",
 * "c10d::ProcessGroupGloo::runLoop", "c10d::(anonymous namespace)::TCPStoreWorkerDaemon",
 * "worker" (a start routine's symbol), "[libgomp.so.1]" (a routine without a symbol: its
 * file). Code addresses are named with @dp and @sym. Return 0 with the name in @buf, -ENOENT
 * (the main thread, or nothing to name it by), -ESTALE (@pd is not that thread's: it exited)
 * or -errno.
 */
int thread_routine__name(pid_t pid, struct pthread_layout *l, struct dwproc *dp,
			 struct symbolizer *sym, pid_t ns_tid, uint64_t pd, char *buf, size_t size);

#endif
