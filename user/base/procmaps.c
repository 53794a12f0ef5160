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
#include <sys/sysmacros.h>
#include <sys/uio.h>

#include "base/procmaps.h"
#include "base/util.h"

/* "start-end perms offset major:minor inode   path" */
static int parse_line(char *line, struct procmap *m)
{
	char perms[5];
	int n = 0;
	size_t len;
	char *path;

	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 " %n", &m->start,
		   &m->end, perms, &m->offset, &m->dev_major, &m->dev_minor, &m->inode, &n) < 7)
		return -EINVAL;
	if (strlen(perms) != 4 || m->end < m->start)
		return -EINVAL;
	m->r = perms[0] == 'r';
	m->w = perms[1] == 'w';
	m->x = perms[2] == 'x';
	m->p = perms[3] == 'p';
	path = line + n;
	len = strlen(path);
	m->deleted = false;
	if (len > 10 && !strcmp(path + len - 10, " (deleted)")) {
		path[len - 10] = '\0';
		m->deleted = true;
	}
	m->path = path;
	return 0;
}

int procmaps__parse(const char *text, struct procmaps *out)
{
	size_t cap = 0, nr = 0;
	struct procmap *maps = NULL;
	char *copy, *line, *save = NULL;
	int err = 0;

	copy = strdup(text);
	if (!copy)
		return -ENOMEM;
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (grow_array(&maps, &cap, nr + 1, sizeof(*maps))) {
			err = -ENOMEM;
			goto cleanup;
		}
		err = parse_line(line, &maps[nr]);
		if (err)
			goto cleanup;
		nr++;
	}
	out->maps = maps;
	out->nr = nr;
	out->text = copy;
	return 0;
cleanup:
	free(maps);
	free(copy);
	return err;
}

int procmaps__read(pid_t pid, struct procmaps *out)
{
	char path[64], *text;
	int err;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	text = read_file(path, 0, NULL);
	if (!text)
		return errno == ENOENT ? -ESRCH : -errno;
	err = procmaps__parse(text, out);
	free(text);
	return err;
}

size_t procmaps__count(pid_t pid)
{
	struct procmaps pm;
	size_t n;

	if (procmaps__read(pid, &pm))
		return 0;
	n = pm.nr;
	procmaps__release(&pm);
	return n;
}

void procmaps__release(struct procmaps *pm)
{
	free(pm->maps);
	free(pm->text);
	pm->maps = NULL;
	pm->text = NULL;
	pm->nr = 0;
}

const struct procmap *procmaps__find(const struct procmaps *pm, uint64_t addr)
{
	size_t lo = 0, hi = pm->nr;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < pm->maps[mid].start)
			hi = mid;
		else if (addr >= pm->maps[mid].end)
			lo = mid + 1;
		else
			return &pm->maps[mid];
	}
	return NULL;
}

const char *procmaps__basename(const struct procmap *m)
{
	const char *s = strrchr(m->path, '/');

	return s ? s + 1 : m->path;
}

/* Does the file behind @fd hold, at the mapping's offset, the bytes the process has there? */
static bool same_bytes(pid_t pid, int fd, const struct procmap *m)
{
	unsigned char a[4096], b[4096];
	struct iovec local = {b, sizeof(b)}, remote;
	ssize_t n, r;

	if (m->w || !m->r)
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

int procmaps__open(pid_t pid, const struct procmap *m)
{
	char fn[PATH_MAX + 64];
	struct stat st;
	int fd, rootfd = -1;

	if (m->path[0] == '/' && !m->deleted) {
		snprintf(fn, sizeof(fn), "/proc/%d/root%s", (int)pid, m->path);
		rootfd = open(fn, O_RDONLY | O_CLOEXEC);
		if (rootfd >= 0 && !fstat(rootfd, &st) && st.st_ino == m->inode &&
		    major(st.st_dev) == m->dev_major && minor(st.st_dev) == m->dev_minor)
			return rootfd;
		/* Replaced since it was mapped (an upgrade), or overlayfs: check below. */
	}
	snprintf(fn, sizeof(fn), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)pid, m->start,
		 m->end);
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
