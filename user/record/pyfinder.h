/* SPDX-License-Identifier: MIT */
/*
 * pyfinder: looks for the CPython interpreter of a program that just began (an exec, a fork,
 * a new target), on a thread of its own, and sets the BPF walker up for it the moment it is
 * found.
 *
 * Right after an exec the loader is still mapping libpython, and the program may run Python
 * code within milliseconds. The recorder handles samples and events some time after they were
 * taken, and the first sample of a new program can take 50 ms to unwind and symbolize (seconds
 * behind, for a program that loaded PyTorch): a look made between samples comes late, and
 * every sample taken until then has native frames only. The recorder asks as soon as the ring
 * buffer's reader sees an exec or a fork (recorder__seen); this thread then looks every 5 ms
 * for the program's first 2 s, however far behind the recorder is. Once found, the
 * interpreter's configuration is in the sampler's maps (py_procs, py_tstates) at once, and its
 * struct pyproc waits for the recorder to take it (pyfinder__take). The result is posted
 * before the sampler is set up, so a sample with Python frames is never handled before the
 * recorder can take the interpreter that resolves them.
 *
 * Thread-safe: every function may be called from any thread; the looks happen on ours.
 */
#ifndef PROBING_PYFINDER_H
#define PROBING_PYFINDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct pyfinder;
struct pyproc;
struct sampling;

/*
 * Called on the finder's thread once the interpreter @pp of @pid's program is set up in the
 * sampler, before the recorder takes it, with @seen_ns: when the look that found it began
 * (monotonic; that program ran then: not the want's since_ns, which may be older than an exec
 * the want was not renewed for yet). For what must begin as soon as Python frames can be
 * sampled (the thread names of a program whose first threads live for milliseconds). @pp is
 * the finder's: copy what is kept. It must not call the finder.
 */
typedef void (*pyfinder_found_fn)(void *ctx, pid_t pid, const struct pyproc *pp, uint64_t seen_ns);

/*
 * Start the looking thread. An interpreter found is set up in @s (sampling__set_python and
 * its thread states) with @max_depth frames, then given to @found(@ctx, ...) if @found is not
 * NULL. NULL with errno on failure.
 */
struct pyfinder *pyfinder__start(struct sampling *s, unsigned int max_depth,
				 pyfinder_found_fn found, void *ctx);

/* Stop the thread and free everything, interpreters found and not taken too. NULL: no-op. */
void pyfinder__free(struct pyfinder *f);

/*
 * Look for the interpreter of the program @pid runs since @since_ns (monotonic: the kernel's
 * time of its exec or fork, or when it became a target) every 5 ms for its first 2 s,
 * whenever its number of mappings differs from the last look's (@maps_seen at first: the
 * caller's own look, procmaps__count; 0 to look at once). A call for a program as old as the
 * one looked for, or older, changes nothing; for a newer one (an exec) it starts over.
 * 0 or -ENOMEM.
 */
int pyfinder__want(struct pyfinder *f, pid_t pid, uint64_t since_ns, size_t maps_seen);

/* Whether some look ended (found, or found unreadable) and was not taken yet. Cheap. */
bool pyfinder__news(const struct pyfinder *f);

/*
 * What the look for @pid found, if it ended: 1 and the interpreter in *@pp (the caller owns it;
 * the sampler is set up for it); -ENOTSUP (a CPython probing cannot read: a warning said
 * which) or another -errno (the sampler could not be set up: nothing was); 0 if nothing yet
 * (still looking, or not asked). *@tried_ns: when the look that ended began (monotonic): the
 * program @pid ran then is the one found. Once a result is taken, the look for @pid is over;
 * with @stop it is over in any case, and the finder changes nothing of @pid in the sampler's
 * maps any more.
 */
int pyfinder__take(struct pyfinder *f, pid_t pid, bool stop, struct pyproc **pp,
		   uint64_t *tried_ns);

/*
 * Stop looking for the interpreter of @pid's program if that program began before
 * @before_ns (UINT64_MAX: whichever it is: it exited, or the caller found it itself); an
 * interpreter found and not taken is freed. Once this returns the finder changes nothing of
 * that program in the sampler's maps (the kernel drops its entry at an exec or an exit).
 */
void pyfinder__forget(struct pyfinder *f, pid_t pid, uint64_t before_ns);

#endif
