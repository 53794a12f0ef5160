/* SPDX-License-Identifier: MIT */
/*
 * outfile: the output files of probing's commands (record -o, flamegraph -o, export -o,
 * query --save), written so that nothing that is not ours is ever destroyed:
 *
 *   - a missing file is created; its directory must exist;
 *   - an existing regular file is replaced only once the new content is complete: data goes
 *     to a temporary file in the same directory, renamed over it at the end (rename(2) is
 *     atomic), so a failure never leaves a truncated file and the old one stays intact until
 *     then. The temporary file is an O_TMPFILE one where the file system has them: it gets a
 *     name (".NAME.XXXXXX", renamed at once) only when complete, so a command killed by any
 *     signal, SIGKILL included, leaves nothing behind; elsewhere it is ".NAME.XXXXXX" from
 *     the start, removed on every failure probing sees. The new file keeps the old one's permission bits (and, as root, its owner);
 *   - a read-only file (no write permission bit, or none for us) is refused, as cp(1) would,
 *     unless the command was given --force (OUTFILE_FORCE);
 *   - a symbolic link is followed to the file it names, which is then created or replaced
 *     under the rules above; the link stays. A link to nothing is refused, and so are links
 *     someone else could have pointed at a file of ours: as root, any link that belongs to
 *     another user than root; otherwise a link in a sticky world-writable directory (/tmp)
 *     owned by neither us nor the directory's owner (the rule of the kernel's
 *     fs.protected_symlinks, applied whatever its setting);
 *   - anything else (a directory, a device, a FIFO, a socket) is refused and left untouched,
 *     except that streams (OUTFILE_STREAM: character devices such as /dev/null, and FIFOs)
 *     are written in place, never replaced;
 *   - "-" means stdout; /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N name our
 *     open descriptors (a shell's redirection, a process substitution): with
 *     OUTFILE_STREAM they are written as they are, like "-" (appending where the shell
 *     opened them for appending), else refused.
 * The rules are checked when the output is opened and again just before the rename.
 */
#ifndef PROBING_OUTFILE_H
#define PROBING_OUTFILE_H

#include <stdbool.h>
#include <stdio.h>

#define OUTFILE_FORCE	   1u /* replace a read-only file too (--force) */
#define OUTFILE_STREAM	   2u /* write character devices and FIFOs in place */
#define OUTFILE_FORCE_HINT 4u /* the command has --force: name it in the read-only message */

/* A checked output path (outpath__check). */
struct outpath {
	char *name;    /* the path as the user gave it, for messages */
	char *dest;    /* what is created or replaced: the path, or where its symbolic link leads */
	bool in_place; /* dest is a stream written in place (OUTFILE_STREAM) */
	int fd;	       /* with in_place: the descriptor @name names (/dev/stdout...), or -1 */
};

/*
 * Check @path under the rules above (OUTFILE_* @flags) and fill @op. Nothing is created or
 * changed. Return 0, or -errno with what is wrong, why and what to do printed
 * (-EISDIR, -EEXIST for a non-regular file, -EACCES for a read-only one or an untrusted
 * link, -ENOENT for a link to nothing, ...). Release @op with outpath__release.
 */
int outpath__check(const char *path, unsigned int flags, struct outpath *op);

/*
 * Check @op->dest again under the same rules (with @flags): it may have changed since
 * outpath__check. Return 0 (it is missing or a regular file that may be replaced), or -errno
 * with the reason printed.
 */
int outpath__recheck(const struct outpath *op, unsigned int flags);

/*
 * Move the complete file @tmp (ours, in the directory of @op->dest) over @op->dest, after
 * checking the rules again (the destination may have changed meanwhile). It takes the
 * permission bits, and as root the owner, of the file it replaces. Return 0, or -errno with
 * the reason printed; @tmp is left in place on failure.
 */
int outpath__replace(const struct outpath *op, const char *tmp, unsigned int flags);

/* Free what @op holds. */
void outpath__release(struct outpath *op);

struct outfile;

/*
 * Start writing @path ("-" = stdout) under the rules above, with OUTFILE_STREAM and the
 * other @flags. Return 0 and *@out, or -errno with a message saying what failed and why
 * already printed (e.g. the directory does not exist, the file is read-only).
 */
int outfile__open(const char *path, unsigned int flags, struct outfile **out);

/* The stream to write to; valid until commit or abort. */
FILE *outfile__fp(struct outfile *of);

/*
 * Finish: flush, and move the temporary file over the destination (outpath__replace). A new
 * file gets the mode open(2) with 0666 and the umask gives. Frees @of. Return 0 or -errno
 * with the reason printed; on failure the temporary file is removed.
 */
int outfile__commit(struct outfile *of);

/* Give up: remove the temporary file. Frees @of; NULL is a no-op. */
void outfile__abort(struct outfile *of);

#endif
