// SPDX-License-Identifier: MIT
/* Output files written through a temporary file and rename(2). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "log.h"
#include "outfile.h"
#include "util.h"

struct outfile {
	FILE *fp;
	char *name; /* as the user gave it, for messages */
	char *path; /* the file to replace; NULL for stdout and special files */
	char *tmp;  /* the temporary file; NULL for stdout and special files */
};

/* Devices, FIFOs, sockets (/dev/stdout, /dev/null, a pipe): written in place, never replaced. */
static int open_special(struct outfile *of, const char *path)
{
	of->fp = fopen(path, "w");
	if (!of->fp) {
		pr_warn("cannot write %s: %s", path, strerror(errno));
		return -errno;
	}
	return 0;
}

int outfile__open(const char *path, struct outfile **out)
{
	struct outfile *of;
	struct stat st;
	char *dest = NULL, *slash;
	const char *dir;
	mode_t mask;
	int fd = -1, err;

	of = calloc(1, sizeof(*of));
	if (!of)
		return -ENOMEM;
	if (!strcmp(path, "-")) {
		of->fp = stdout;
		*out = of;
		return 0;
	}
	of->name = strdup(path);
	if (!of->name) {
		err = -ENOMEM;
		goto cleanup;
	}
	if (!stat(path, &st)) {
		if (S_ISDIR(st.st_mode)) {
			pr_warn("cannot write %s: it is a directory; give a file name", path);
			err = -EISDIR;
			goto cleanup;
		}
		if (!S_ISREG(st.st_mode)) {
			err = open_special(of, path);
			if (err)
				goto cleanup;
			*out = of;
			return 0;
		}
		/* Replace what a symbolic link points to, not the link. */
		dest = realpath(path, NULL);
	} else {
		dest = strdup(path);
	}
	if (!dest) {
		err = -errno;
		pr_warn("cannot write %s: %s", path, strerror(errno));
		goto cleanup;
	}
	of->path = dest;
	dest = strdup(dest);
	if (!dest) {
		err = -ENOMEM;
		goto cleanup;
	}
	/* In the same directory, so the final rename cannot cross file systems. */
	slash = strrchr(dest, '/');
	if (slash)
		*slash = '\0';
	dir = !slash ? "." : slash == dest ? "" : dest; /* "" + "/" = the root */
	if (asprintf(&of->tmp, "%s/.%s.XXXXXX", dir, slash ? slash + 1 : dest) < 0) {
		of->tmp = NULL;
		err = -ENOMEM;
		goto cleanup;
	}
	fd = mkostemp(of->tmp, O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		pr_warn("cannot write %s: %s", path, strerror(errno));
		free(of->tmp);
		of->tmp = NULL;
		goto cleanup;
	}
	/* mkstemp makes the file 0600; give it the mode open(path, O_CREAT, 0666) would. */
	mask = umask(0);
	umask(mask);
	if (fchmod(fd, 0666 & ~mask))
		pr_debug("%s: cannot set the mode: %s", of->tmp, strerror(errno));
	of->fp = fdopen(fd, "w");
	if (!of->fp) {
		err = -errno;
		pr_warn("cannot write %s: %s", path, strerror(errno));
		goto cleanup;
	}
	free(dest);
	*out = of;
	return 0;
cleanup:
	if (of->fp)
		fclose(of->fp);
	else if (fd >= 0)
		close(fd);
	if (of->tmp)
		unlink(of->tmp);
	free(dest);
	free(of->tmp);
	free(of->path);
	free(of->name);
	free(of);
	return err;
}

FILE *outfile__fp(struct outfile *of)
{
	return of->fp;
}

int outfile__commit(struct outfile *of)
{
	int err = 0;

	errno = 0;
	if (of->fp == stdout) {
		if (fflush(stdout) || ferror(stdout)) {
			err = errno ? -errno : -EIO;
			pr_warn("cannot write the output: %s", strerror(-err));
		}
		free(of);
		return err;
	}
	if (fflush(of->fp) || ferror(of->fp)) {
		err = errno ? -errno : -EIO;
		pr_warn("cannot write %s: %s", of->name, strerror(-err));
	}
	if (fclose(of->fp) && !err) {
		err = -errno;
		pr_warn("cannot write %s: %s", of->name, strerror(errno));
	}
	of->fp = NULL;
	if (!err && of->tmp && rename(of->tmp, of->path)) {
		err = -errno;
		pr_warn("cannot write %s: %s", of->name, strerror(errno));
	}
	if (err && of->tmp)
		unlink(of->tmp);
	free(of->tmp);
	free(of->path);
	free(of->name);
	free(of);
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
	free(of->tmp);
	free(of->path);
	free(of->name);
	free(of);
}
