// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "watch/segdir.h"

struct seg {
	char *path;	   /* complete name (rec-...db) */
	char *partial;	   /* its name while written (path.partial) */
	double start, end; /* unix seconds; end 0: the current one */
	bool settled;	   /* complete, renamed, no side file: its size is @bytes for good */
	uint64_t bytes;
};

struct segdir {
	char *dir;
	int lock_fd;
	unsigned int n_seg, n_rep; /* names made so far */
	struct seg *segs;	   /* oldest first; the last is the current one */
	size_t nsegs, capsegs;
	const char **since; /* segdir__since's answer */
	size_t capsince;
	char **reports;
	size_t nreports, capreports;
};

int segdir__open(const char *cmd, const char *dir, struct segdir **out)
{
	struct segdir *sd;
	char lock[PATH_MAX], pid[32];
	struct stat sb;
	int err;

	if (mkdir(dir, 0750) && errno != EEXIST) {
		err = -errno;
		log_cmd(cmd, "cannot create the directory %s: %s", dir, strerror(-err));
		return err;
	}
	if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) {
		log_cmd(cmd,
			"%s is not a directory: -o names the directory where the watch keeps its "
			"recording and reports",
			dir);
		return -ENOTDIR;
	}
	if (snprintf(lock, sizeof(lock), "%s/%s", dir, SEGDIR_LOCK) >= (int)sizeof(lock))
		return -ENAMETOOLONG;
	sd = calloc(1, sizeof(*sd));
	if (!sd)
		return -ENOMEM;
	sd->dir = strdup(dir);
	sd->lock_fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640);
	if (!sd->dir || sd->lock_fd < 0) {
		err = sd->dir ? -errno : -ENOMEM;
		log_cmd(cmd, "cannot write in %s: %s", dir, strerror(-err));
		goto fail;
	}
	if (flock(sd->lock_fd, LOCK_EX | LOCK_NB)) {
		err = -errno;
		if (err == -EWOULDBLOCK) {
			log_cmd(cmd,
				"another watch (pid %d) writes into %s; give each watch a "
				"directory of its own ('probing watch --dump %s' asks that one for "
				"a report)",
				(int)segdir__watcher(cmd, dir), dir, dir);
			err = -EBUSY;
		} else {
			log_cmd(cmd, "cannot lock %s: %s", lock, strerror(-err));
		}
		goto fail;
	}
	snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(sd->lock_fd, 0) || pwrite(sd->lock_fd, pid, strlen(pid), 0) < 0) {
		err = -errno;
		log_cmd(cmd, "cannot write %s: %s", lock, strerror(-err));
		goto fail;
	}
	*out = sd;
	return 0;
fail:
	segdir__free(sd);
	return err;
}

void segdir__free(struct segdir *sd)
{
	size_t i;

	if (!sd)
		return;
	if (sd->lock_fd >= 0)
		close(sd->lock_fd); /* the lock goes with it; the file stays (its pid is stale) */
	for (i = 0; i < sd->nsegs; i++) {
		free(sd->segs[i].path);
		free(sd->segs[i].partial);
	}
	for (i = 0; i < sd->nreports; i++)
		free(sd->reports[i]);
	free(sd->reports);
	free(sd->segs);
	free(sd->since);
	free(sd->dir);
	free(sd);
}

/* "DIR/PREFIX-YYYYmmdd-HHMMSS-N.db" into @buf. */
static int make_name(const struct segdir *sd, const char *prefix, unsigned int n, char *buf,
		     size_t size)
{
	time_t t = time(NULL);
	struct tm tm;
	char stamp[32];

	localtime_r(&t, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
	if (snprintf(buf, size, "%s/%s-%s-%u.db", sd->dir, prefix, stamp, n) >= (int)size)
		return -ENAMETOOLONG;
	return 0;
}

int segdir__next_segment(struct segdir *sd, char *buf, size_t size)
{
	double now = now_real_ns() / 1e9;
	struct seg *s;
	int err;

	err = make_name(sd, "rec", ++sd->n_seg, buf, size);
	if (err)
		return err;
	if (grow_array(&sd->segs, &sd->capsegs, sd->nsegs + 1, sizeof(*sd->segs)))
		return -ENOMEM;
	s = &sd->segs[sd->nsegs];
	s->path = strdup(buf);
	if (!s->path || asprintf(&s->partial, "%s.partial", buf) < 0) {
		free(s->path);
		return -ENOMEM;
	}
	s->start = now;
	s->end = 0;
	s->settled = false;
	s->bytes = 0;
	if (sd->nsegs)
		sd->segs[sd->nsegs - 1].end = now;
	sd->nsegs++;
	return 0;
}

int segdir__next_report(struct segdir *sd, char *buf, size_t size)
{
	int err = make_name(sd, "stall", ++sd->n_rep, buf, size);
	char *s;

	if (err)
		return err;
	if (grow_array(&sd->reports, &sd->capreports, sd->nreports + 1, sizeof(*sd->reports)))
		return -ENOMEM;
	s = strdup(buf);
	if (!s)
		return -ENOMEM;
	sd->reports[sd->nreports++] = s;
	return 0;
}

/* Bytes of @path and its side files; *@only_file: @path is there, without side files. */
static uint64_t file_bytes(const char *path, bool *only_file)
{
	static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
	char name[PATH_MAX + 16];
	struct stat sb;
	uint64_t n = 0;
	size_t i;

	*only_file = true;
	for (i = 0; i < ARRAY_SIZE(sfx); i++) {
		snprintf(name, sizeof(name), "%s%s", path, sfx[i]);
		if (!lstat(name, &sb) && S_ISREG(sb.st_mode)) {
			n += (uint64_t)sb.st_blocks * 512 > (uint64_t)sb.st_size
				     ? (uint64_t)sb.st_size
				     : (uint64_t)sb.st_blocks * 512;
			*only_file &= !i;
		} else if (!i) {
			*only_file = false;
		}
	}
	return n;
}

/* The file a segment is in now: its complete name, or .partial while written. */
static const char *seg_file(const struct segdir *sd, size_t i)
{
	return i + 1 == sd->nsegs ? sd->segs[i].partial : sd->segs[i].path;
}

/*
 * Bytes of segment @i. A segment before the current one, once under its complete name with no
 * side file (its recording closed), no longer changes: its size is kept, not looked up ten
 * times a second (a 30-minute watch of 60 s segments made 1,300 lstat calls a second).
 */
static uint64_t seg_bytes(struct segdir *sd, size_t i)
{
	struct seg *s = &sd->segs[i];
	bool only_file;
	uint64_t n;

	if (s->settled)
		return s->bytes;
	n = file_bytes(seg_file(sd, i), &only_file);
	if (i + 1 < sd->nsegs && only_file) {
		s->settled = true;
		s->bytes = n;
	}
	return n;
}

uint64_t segdir__bytes(struct segdir *sd)
{
	uint64_t n = 0;
	size_t i;

	for (i = 0; i < sd->nsegs; i++)
		n += seg_bytes(sd, i);
	return n;
}

uint64_t segdir__current_bytes(struct segdir *sd)
{
	return sd->nsegs ? seg_bytes(sd, sd->nsegs - 1) : 0;
}

static void remove_file(const char *path)
{
	static const char *const sfx[] = {"",	      "-wal",	      "-shm",	     "-journal",
					  ".partial", ".partial-wal", ".partial-shm"};
	char name[PATH_MAX + 16];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(sfx); i++) {
		snprintf(name, sizeof(name), "%s%s", path, sfx[i]);
		if (unlink(name) && errno != ENOENT)
			pr_debug("cannot remove %s: %s", name, strerror(errno));
	}
}

int segdir__prune(struct segdir *sd, double keep_s, uint64_t max_bytes)
{
	double now = now_real_ns() / 1e9;
	uint64_t cur, done = 0, room = max_bytes / 2;
	int removed = 0;
	size_t i;

	if (sd->nsegs <= 1)
		return 0;
	/* Measured once (its files are the ones that change), not at each segment removed. */
	cur = segdir__current_bytes(sd);
	if (max_bytes)
		for (i = 0; i + 1 < sd->nsegs; i++)
			done += seg_bytes(sd, i);
	while (sd->nsegs > 1) {
		const struct seg *old = &sd->segs[0];

		/* Room for the segment being written to grow to a quarter (it is then rotated,
		 * at a check ten times a second) and as much again: the growth past that while the
		 * watch's loop is late on a loaded machine (a third was once 3 % short: a current
		 * segment of 47 %, its WAL 321 KB, after a late check), and its -shm. The others
		 * leave it that much. */
		if (!(now - old->end > keep_s) &&
		    !(max_bytes && done + (cur > room ? cur : room) > max_bytes))
			break;
		if (max_bytes) {
			uint64_t b = seg_bytes(sd, 0);

			done = done > b ? done - b : 0;
		}
		pr_debug("removing segment %s", old->path);
		remove_file(old->path);
		free(old->path);
		free(old->partial);
		memmove(&sd->segs[0], &sd->segs[1], (sd->nsegs - 1) * sizeof(*sd->segs));
		sd->nsegs--;
		removed++;
	}
	return removed;
}

int segdir__since(struct segdir *sd, double from, const char *const **files)
{
	size_t i, n = 0;

	if (grow_array(&sd->since, &sd->capsince, sd->nsegs + 1, sizeof(*sd->since)))
		return 0;
	for (i = 0; i < sd->nsegs; i++)
		if (!sd->segs[i].end || sd->segs[i].end >= from)
			sd->since[n++] = seg_file(sd, i);
	*files = sd->since;
	return n;
}

void segdir__prune_reports(struct segdir *sd, int max)
{
	while (max > 0 && sd->nreports > (size_t)max) {
		remove_file(sd->reports[0]);
		free(sd->reports[0]);
		memmove(&sd->reports[0], &sd->reports[1],
			(sd->nreports - 1) * sizeof(*sd->reports));
		sd->nreports--;
	}
}

pid_t segdir__watcher(const char *cmd, const char *dir)
{
	char lock[PATH_MAX], buf[32];
	ssize_t n;
	long pid;
	int fd, err;

	if (snprintf(lock, sizeof(lock), "%s/%s", dir, SEGDIR_LOCK) >= (int)sizeof(lock))
		return -ENAMETOOLONG;
	fd = open(lock, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		if (err == -ENOENT)
			return -ESRCH;
		log_cmd(cmd, "cannot read %s: %s", lock, strerror(-err));
		return err;
	}
	/* A lock we can take is no one's: no watch runs there. */
	if (!flock(fd, LOCK_SH | LOCK_NB)) {
		close(fd);
		return -ESRCH;
	}
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	if (n <= 0)
		return -ESRCH;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	if (parse_long(buf, 1, INT_MAX, &pid))
		return -ESRCH;
	return (pid_t)pid;
}
