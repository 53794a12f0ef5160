// SPDX-License-Identifier: MIT
/* Output files: checked paths, written through a temporary file and rename(2). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/outfile.h"
#include "base/util.h"

/* "a directory", "a FIFO (named pipe)", ... for messages. */
static const char *kind_name(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISFIFO(mode))
		return "a FIFO (named pipe)";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISLNK(mode))
		return "a symbolic link";
	return "not a regular file";
}

/* Could we write the regular file @path (@st) without privileges overriding its mode? */
static bool read_only(const char *path, const struct stat *st)
{
	return !(st->st_mode & 0222) || faccessat(AT_FDCWD, path, W_OK, AT_EACCESS);
}

/* The rules for what exists at @op->dest (@st, not a symbolic link). */
static int check_existing(struct outpath *op, const struct stat *st, unsigned int flags)
{
	char name[PATH_MAX * 2 + 32];

	/* "out.svg", or "out.svg (a link to /data/out.svg)" */
	if (strcmp(op->name, op->dest))
		snprintf(name, sizeof(name), "%s (a link to %s)", op->name, op->dest);
	else
		snprintf(name, sizeof(name), "%s", op->name);

	if (S_ISREG(st->st_mode)) {
		if (!(flags & OUTFILE_FORCE) && read_only(op->dest, st)) {
			pr_warn("not replacing %s: the file is read-only (mode %04o)", name,
				(unsigned int)(st->st_mode & 07777));
			if (flags & OUTFILE_FORCE_HINT)
				pr_warn("add --force to replace it anyway, or give another file "
					"name");
			else
				pr_warn("make it writable (chmod u+w %s) or give another file name",
					op->dest);
			return -EACCES;
		}
		return 0;
	}
	if (S_ISDIR(st->st_mode)) {
		pr_warn("cannot write %s: it is a directory; give a file name", name);
		return -EISDIR;
	}
	if ((flags & OUTFILE_STREAM) && (S_ISCHR(st->st_mode) || S_ISFIFO(st->st_mode))) {
		op->in_place = true;
		return 0;
	}
	pr_warn("not writing %s: it is %s, not a regular file; probing writes its output only "
		"to regular files and leaves anything else untouched. Give a file name",
		name, kind_name(st->st_mode));
	return -EEXIST;
}

/*
 * May we follow the symbolic link @path (@lst)? Yes if it is ours or root's. Not if we are
 * root and it belongs to another user, who could have pointed it at any file (root would
 * then replace it). Not if it sits in a sticky world-writable directory and belongs to
 * neither us nor the directory's owner (fs.protected_symlinks). Otherwise yes: it can lead
 * us to nothing we could not write anyway.
 */
static int check_link(const char *path, const struct stat *lst)
{
	struct stat dst;
	char *copy;
	const char *dir;
	int err = 0;

	if (lst->st_uid == geteuid() || lst->st_uid == 0)
		return 0;
	if (geteuid() == 0) {
		pr_warn("not following the symbolic link %s: it belongs to user %u, who could have "
			"pointed it at any file, and probing runs as root. Give the path of the "
			"file itself",
			path, (unsigned int)lst->st_uid);
		return -EACCES;
	}
	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	dir = dirname(copy);
	if (stat(dir, &dst)) {
		err = -errno;
		pr_warn("cannot write %s: %s: %s", path, dir, strerror(errno));
	} else if ((dst.st_mode & (S_ISVTX | S_IWOTH)) == (S_ISVTX | S_IWOTH) &&
		   lst->st_uid != dst.st_uid) {
		pr_warn("not following the symbolic link %s: it is in the shared directory %s "
			"(sticky, writable by everyone) and belongs to user %u, so anyone could "
			"have pointed it at a file of yours. Give the path of the file itself",
			path, dir, (unsigned int)lst->st_uid);
		err = -EACCES;
	}
	free(copy);
	return err;
}

/* The descriptor /dev/stdout, /dev/stderr, /dev/fd/N or /proc/self/fd/N names, or -1. */
static int descriptor_name(const char *path)
{
	const char *num = NULL;
	long v;

	if (!strcmp(path, "/dev/stdout"))
		return 1;
	if (!strcmp(path, "/dev/stderr"))
		return 2;
	if (!strncmp(path, "/dev/fd/", 8))
		num = path + 8;
	else if (!strncmp(path, "/proc/self/fd/", 14))
		num = path + 14;
	if (!num || parse_long(num, 0, INT_MAX, &v))
		return -1;
	return v;
}

int outpath__check(const char *path, unsigned int flags, struct outpath *op)
{
	char target[PATH_MAX];
	struct stat st;
	ssize_t n;
	int err;

	memset(op, 0, sizeof(*op));
	op->fd = -1;
	op->name = strdup(path);
	if (!op->name)
		return -ENOMEM;
	op->fd = descriptor_name(path);
	if (op->fd >= 0) {
		/* Already open: nothing to create or replace, and no real name to rename onto. */
		if (!(flags & OUTFILE_STREAM)) {
			pr_warn("not writing %s: it names an open file descriptor, not a file; "
				"give "
				"a file name",
				path);
			err = -EINVAL;
			goto fail;
		}
		op->dest = strdup(path);
		op->in_place = true;
		if (!op->dest) {
			err = -ENOMEM;
			goto fail;
		}
		return 0;
	}
	if (lstat(path, &st)) {
		if (errno != ENOENT) {
			err = -errno;
			pr_warn("cannot write %s: %s", path, strerror(errno));
			goto fail;
		}
		/* A new file; a missing directory is reported when the file is made. */
		op->dest = strdup(path);
		if (!op->dest) {
			err = -ENOMEM;
			goto fail;
		}
		return 0;
	}
	if (S_ISLNK(st.st_mode)) {
		err = check_link(path, &st);
		if (err)
			goto fail;
		op->dest = realpath(path, NULL);
		if (!op->dest) {
			err = -errno;
			n = readlink(path, target, sizeof(target) - 1);
			target[n > 0 ? n : 0] = '\0';
			if (err == -ENOENT)
				pr_warn("not writing %s: it is a symbolic link to %s, which does "
					"not "
					"exist. Give the path of the file to create",
					path, target);
			else
				pr_warn("cannot write %s (a symbolic link to %s): %s", path, target,
					strerror(-err));
			goto fail;
		}
		if (stat(op->dest, &st)) {
			err = -errno;
			pr_warn("cannot write %s: %s", op->dest, strerror(errno));
			goto fail;
		}
	} else {
		op->dest = strdup(path);
		if (!op->dest) {
			err = -ENOMEM;
			goto fail;
		}
	}
	err = check_existing(op, &st, flags);
	if (err)
		goto fail;
	return 0;
fail:
	outpath__release(op);
	return err;
}

/* Check @op->dest again before replacing it; fill *@st and *@exists. */
static int recheck(const struct outpath *op, unsigned int flags, struct stat *st, bool *exists)
{
	struct outpath again = *op;

	*exists = false;
	if (lstat(op->dest, st)) {
		int e = errno;

		if (e == ENOENT)
			return 0;
		pr_warn("cannot write %s: %s", op->name, strerror(e));
		return -e;
	}
	*exists = true;
	if (S_ISLNK(st->st_mode)) {
		pr_warn("not replacing %s: %s became a symbolic link meanwhile", op->name,
			op->dest);
		return -EEXIST;
	}
	return check_existing(&again, st, flags & ~OUTFILE_STREAM);
}

int outpath__recheck(const struct outpath *op, unsigned int flags)
{
	struct stat st;
	bool exists;

	return recheck(op, flags, &st, &exists);
}

int outpath__replace(const struct outpath *op, const char *tmp, unsigned int flags)
{
	struct stat st;
	bool exists;
	int err;

	err = recheck(op, flags, &st, &exists);
	if (err)
		return err;
	if (exists) {
		/* The replacement looks like what it replaces: owner first (chown drops mode bits). */
		if (geteuid() == 0 && chown(tmp, st.st_uid, st.st_gid))
			pr_debug("%s: cannot give it the owner of %s: %s", tmp, op->dest,
				 strerror(errno));
		if (chmod(tmp, st.st_mode & 0777))
			pr_debug("%s: cannot give it the mode of %s: %s", tmp, op->dest,
				 strerror(errno));
	}
	if (rename(tmp, op->dest)) {
		err = -errno;
		pr_warn("cannot write %s: %s", op->name, strerror(errno));
		return err;
	}
	return 0;
}

void outpath__release(struct outpath *op)
{
	free(op->name);
	free(op->dest);
	op->name = op->dest = NULL;
}

struct outfile {
	FILE *fp;
	struct outpath op;
	char *tmp;	/* the temporary file's name; NULL for stdout, streams and anon_dir */
	char *anon_dir; /* an O_TMPFILE file of this directory: named only once complete */
	unsigned int flags;
};

static void outfile_free(struct outfile *of)
{
	outpath__release(&of->op);
	free(of->tmp);
	free(of->anon_dir);
	free(of);
}

/* A stream (OUTFILE_STREAM): written in place, after checking it still is one. */
static int open_in_place(struct outfile *of)
{
	const char *path = of->op.dest;
	struct stat st;
	int fd;

	if (of->op.fd >= 0) {
		/* Our own descriptor, shared: offset and O_APPEND as the shell set them. */
		fd = fcntl(of->op.fd, F_DUPFD_CLOEXEC, 3);
		if (fd < 0) {
			pr_warn("cannot write %s: descriptor %d is not open", of->op.name,
				of->op.fd);
			return -EBADF;
		}
		of->fp = fdopen(fd, "w");
		if (!of->fp) {
			close(fd);
			return -ENOMEM;
		}
		return 0;
	}
	fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
		int e = fd < 0 ? errno : EEXIST;

		pr_warn("cannot write %s: %s", of->op.name,
			e == EEXIST ? "it changed while probing opened it" : strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	of->fp = fdopen(fd, "w");
	if (!of->fp) {
		close(fd);
		return -ENOMEM;
	}
	return 0;
}

/* "DIR/.BASE.XXXXXX" with six random characters, in *@out (to free). */
static int temporary_name(const char *dir, const char *base, char **out)
{
	static const char chars[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	unsigned char r[6];
	char suffix[7];
	size_t i;

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -EIO;
	for (i = 0; i < sizeof(r); i++)
		suffix[i] = chars[r[i] % (sizeof(chars) - 1)];
	suffix[6] = '\0';
	if (asprintf(out, "%s/.%s.%s", dir, base, suffix) < 0) {
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

/*
 * The temporary file next to the destination (same file system: rename cannot fail on it).
 * An O_TMPFILE file where the file system has them: it has no name until it is complete
 * (link_temporary), so a command killed meanwhile, by any signal, leaves nothing behind.
 * Elsewhere a named ".NAME.XXXXXX", removed on every failure probing sees.
 */
static int open_temporary(struct outfile *of)
{
	char *dir_copy = strdup(of->op.dest), *base_copy = strdup(of->op.dest);
	const char *dir;
	mode_t mask;
	int fd = -1, err = 0;

	if (!dir_copy || !base_copy) {
		err = -ENOMEM;
		goto cleanup;
	}
	dir = dirname(dir_copy);
	/* O_TMPFILE takes the mode open(path, O_CREAT, 0666) would give, umask applied. */
	fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
	if (fd >= 0) {
		of->anon_dir = strdup(dir);
		if (!of->anon_dir) {
			close(fd);
			err = -ENOMEM;
			goto cleanup;
		}
		goto opened;
	}
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
		err = -errno;
		pr_warn("cannot write %s: %s", of->op.name, strerror(errno));
		goto cleanup;
	}
	if (asprintf(&of->tmp, "%s/.%s.XXXXXX", dir, basename(base_copy)) < 0) {
		of->tmp = NULL;
		err = -ENOMEM;
		goto cleanup;
	}
	fd = mkostemp(of->tmp, O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		pr_warn("cannot write %s: %s", of->op.name, strerror(errno));
		free(of->tmp);
		of->tmp = NULL;
		goto cleanup;
	}
	/* mkstemp makes the file 0600; give it the mode open(path, O_CREAT, 0666) would. */
	mask = umask(0);
	umask(mask);
	if (fchmod(fd, 0666 & ~mask))
		pr_debug("%s: cannot set the mode: %s", of->tmp, strerror(errno));
opened:
	of->fp = fdopen(fd, "w");
	if (!of->fp) {
		err = -errno;
		close(fd);
		if (of->tmp)
			unlink(of->tmp);
		free(of->tmp);
		of->tmp = NULL;
	}
cleanup:
	free(dir_copy);
	free(base_copy);
	return err;
}

/*
 * Give the complete O_TMPFILE file of @of a name, ".NAME.XXXXXX" beside the destination, in
 * of->tmp (then renamed over the destination as any temporary file). Return 0 or -errno with
 * the reason printed.
 */
static int link_temporary(struct outfile *of)
{
	char *base_copy = strdup(of->op.dest), proc[64];
	int fd = fileno(of->fp), err = 0, tries;

	if (!base_copy)
		return -ENOMEM;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	for (tries = 0; tries < 100; tries++) {
		err = temporary_name(of->anon_dir, basename(base_copy), &of->tmp);
		if (err)
			break;
		/* Through /proc (no privilege needed), else AT_EMPTY_PATH (CAP_DAC_READ_SEARCH). */
		if (!linkat(AT_FDCWD, proc, AT_FDCWD, of->tmp, AT_SYMLINK_FOLLOW) ||
		    (errno == ENOENT && !linkat(fd, "", AT_FDCWD, of->tmp, AT_EMPTY_PATH)))
			break;
		err = -errno;
		free(of->tmp);
		of->tmp = NULL;
		if (err != -EEXIST)
			break;
	}
	if (err)
		pr_warn("cannot write %s: %s", of->op.name, strerror(-err));
	free(base_copy);
	return err;
}

int outfile__open(const char *path, unsigned int flags, struct outfile **out)
{
	struct outfile *of;
	int err;

	of = calloc(1, sizeof(*of));
	if (!of)
		return -ENOMEM;
	of->flags = flags | OUTFILE_STREAM;
	if (!strcmp(path, "-")) {
		of->fp = stdout;
		*out = of;
		return 0;
	}
	err = outpath__check(path, of->flags, &of->op);
	if (!err)
		err = of->op.in_place ? open_in_place(of) : open_temporary(of);
	if (err) {
		outfile_free(of);
		return err;
	}
	*out = of;
	return 0;
}

FILE *outfile__fp(struct outfile *of)
{
	return of->fp;
}

int outfile__commit(struct outfile *of)
{
	const char *name = of->op.name ? of->op.name : "the output";
	int err = 0;

	errno = 0;
	if (of->fp == stdout) {
		if (fflush(stdout) || ferror(stdout)) {
			err = errno ? -errno : -EIO;
			pr_warn("cannot write the output: %s", strerror(-err));
		}
		outfile_free(of);
		return err;
	}
	if (fflush(of->fp) || ferror(of->fp)) {
		err = errno ? -errno : -EIO;
		pr_warn("cannot write %s: %s", name, strerror(-err));
	}
	if (!err && of->anon_dir)
		err = link_temporary(of);
	if (fclose(of->fp) && !err) {
		err = -errno;
		pr_warn("cannot write %s: %s", name, strerror(errno));
	}
	of->fp = NULL;
	if (!err && of->tmp)
		err = outpath__replace(&of->op, of->tmp, of->flags);
	if (err && of->tmp)
		unlink(of->tmp);
	outfile_free(of);
	return err;
}

void outfile__abort(struct outfile *of)
{
	if (!of)
		return;
	if (of->fp && of->fp != stdout)
		fclose(of->fp);
	if (of->tmp)
		unlink(of->tmp);
	outfile_free(of);
}
