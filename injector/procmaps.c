// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/sysmacros.h>

#include "procmaps.h"
#include "util.h"

void procmaps__free(struct procmaps *pm)
{
	int i;

	if (!pm)
		return;
	for (i = 0; i < pm->nr; i++)
		free(pm->m[i].path);
	free(pm->m);
	pm->m = NULL;
	pm->nr = 0;
}

static int parse_line(char *line, struct mapping *m)
{
	unsigned int major, minor;
	unsigned long long ino;
	int pos = 0;
	size_t n;
	char *path;

	memset(m, 0, sizeof(*m));
	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %llu %n", &m->start,
		   &m->end, m->perms, &m->offset, &major, &minor, &ino, &pos) < 7 ||
	    !pos)
		return -EINVAL;
	m->dev = makedev(major, minor);
	m->ino = ino;
	path = line + pos;
	while (*path == ' ')
		path++;
	n = strlen(path);
	while (n && (path[n - 1] == '\n' || path[n - 1] == ' '))
		path[--n] = '\0';
	if (n > 10 && !strcmp(path + n - 10, " (deleted)")) {
		path[n - 10] = '\0';
		m->deleted = true;
	}
	m->path = strdup(path);
	return m->path ? 0 : -ENOMEM;
}

int procmaps__read(pid_t pid, struct procmaps *out)
{
	char fn[64], *buf, *line, *save = NULL;
	struct mapping *tmp;
	int cap = 0, err = 0;
	size_t len;

	out->m = NULL;
	out->nr = 0;
	snprintf(fn, sizeof(fn), "/proc/%d/maps", pid);
	buf = read_file(fn, 0, &len);
	if (!buf)
		return errno == ENOENT ? -ESRCH : -errno;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (out->nr == cap) {
			cap = cap ? cap * 2 : 256;
			tmp = realloc(out->m, cap * sizeof(*tmp));
			if (!tmp) {
				err = -ENOMEM;
				goto cleanup;
			}
			out->m = tmp;
		}
		if (parse_line(line, &out->m[out->nr]) == 0)
			out->nr++;
	}
	if (!out->nr)
		err = -ESRCH; /* a zombie has no mappings */
cleanup:
	free(buf);
	if (err)
		procmaps__free(out);
	return err;
}

const struct mapping *procmaps__find(const struct procmaps *pm, uint64_t addr)
{
	int lo = 0, hi = pm->nr - 1;

	/* maps is sorted by address. */
	while (lo <= hi) {
		int mid = (lo + hi) / 2;

		if (addr < pm->m[mid].start)
			hi = mid - 1;
		else if (addr >= pm->m[mid].end)
			lo = mid + 1;
		else
			return &pm->m[mid];
	}
	return NULL;
}

const char *procmaps__basename(const struct mapping *m)
{
	const char *s = strrchr(m->path, '/');

	return s ? s + 1 : m->path;
}

/*
 * Does the file behind @fd hold, at the mapping's offset, the bytes the process has in
 * memory there? Only for read-only mappings (nothing relocated them). Used when inode
 * numbers cannot tell: overlayfs reports the underlying inode in maps but its own on stat.
 */
static bool same_bytes(pid_t pid, int fd, const struct mapping *m)
{
	unsigned char a[4096], b[4096];
	struct iovec local = {b, sizeof(b)}, remote;
	ssize_t n, r;

	if (strchr(m->perms, 'w') || m->perms[0] != 'r')
		return false;
	n = pread(fd, a, sizeof(a), m->offset);
	if (n <= 0)
		return false;
	if ((uint64_t)n > m->end - m->start)
		n = m->end - m->start;
	local.iov_len = n;
	remote.iov_base = (void *)(uintptr_t)m->start;
	remote.iov_len = n;
	r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
	return r == n && !memcmp(a, b, n);
}

int procmaps__open(pid_t pid, const struct mapping *m)
{
	char fn[PATH_MAX + 64];
	struct stat st;
	int fd, rootfd = -1;

	if (m->path[0] == '/' && !m->deleted) {
		snprintf(fn, sizeof(fn), "/proc/%d/root%s", pid, m->path);
		rootfd = open(fn, O_RDONLY | O_CLOEXEC);
		if (rootfd >= 0 && !fstat(rootfd, &st) && st.st_ino == m->ino &&
		    st.st_dev == m->dev)
			return rootfd;
		/* Otherwise replaced since it was mapped (an upgrade), or overlayfs: check below. */
	}
	snprintf(fn, sizeof(fn), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, m->start, m->end);
	fd = open(fn, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (rootfd >= 0)
			close(rootfd);
		return fd;
	}
	fd = -errno;
	if (rootfd >= 0) {
		if (same_bytes(pid, rootfd, m))
			return rootfd;
		close(rootfd);
		return -ESTALE;
	}
	return fd;
}
