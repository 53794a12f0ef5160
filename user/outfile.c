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
	char *path; /* NULL for stdout */
	char *tmp;
};

int outfile__open(const char *path, struct outfile **out)
{
	struct outfile *of;
	struct stat st;
	char *copy = NULL, *slash;
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
	if (!stat(path, &st) && S_ISDIR(st.st_mode)) {
		pr_warn("cannot write %s: it is a directory; give a file name", path);
		err = -EISDIR;
		goto cleanup;
	}
	of->path = strdup(path);
	copy = strdup(path);
	if (!of->path || !copy) {
		err = -ENOMEM;
		goto cleanup;
	}
	/* In the same directory, so the final rename cannot cross file systems. */
	slash = strrchr(copy, '/');
	if (slash)
		*slash = '\0';
	if (asprintf(&of->tmp, "%s/.%s.XXXXXX",
		     !slash	     ? "."
		     : slash == copy ? ""
				     : copy,
		     slash ? slash + 1 : copy) < 0) {
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
	fchmod(fd, 0666 & ~mask);
	of->fp = fdopen(fd, "w");
	if (!of->fp) {
		err = -errno;
		pr_warn("cannot write %s: %s", path, strerror(errno));
		goto cleanup;
	}
	free(copy);
	*out = of;
	return 0;
cleanup:
	if (fd >= 0)
		close(fd);
	if (of->tmp)
		unlink(of->tmp);
	free(copy);
	free(of->tmp);
	free(of->path);
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
		pr_warn("cannot write %s: %s", of->path, strerror(-err));
	}
	if (fclose(of->fp) && !err) {
		err = -errno;
		pr_warn("cannot write %s: %s", of->path, strerror(errno));
	}
	of->fp = NULL;
	if (!err && rename(of->tmp, of->path)) {
		err = -errno;
		pr_warn("cannot write %s: %s", of->path, strerror(errno));
	}
	if (err)
		unlink(of->tmp);
	free(of->tmp);
	free(of->path);
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
	free(of);
}
