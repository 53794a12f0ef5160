// SPDX-License-Identifier: MIT
/*
 * A span of recording read as one (recwindow.h): find the files that hold it (a watch
 * directory's segments, or the one file), check each, copy the span's rows into a temporary
 * database (store__copy_window, as a watch's report copies its window), seal it as a
 * recording connection is sealed.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "record/store.h"
#include "report/recording.h"
#include "report/recwindow.h"

/* One file of the span. */
struct segment {
	char *path;	   /* as found: rec-...db, or rec-...db.partial */
	char *uri;	   /* read-only "file:" URI of it (ATTACH) */
	char *watch;	   /* its meta watch_id; NULL: from a probing before watch ids */
	double start, end; /* meta: unix seconds */
	double mtime;	   /* written last: not before its meta end */
	bool partial;	   /* being written, or left so by a killed watch */
};

struct segments {
	struct segment *v;
	size_t n, cap;
};

/* Drop the entries of @ss from @from on. */
static void truncate_segments(struct segments *ss, size_t from)
{
	for (size_t i = from; i < ss->n; i++) {
		free(ss->v[i].path);
		free(ss->v[i].uri);
		free(ss->v[i].watch);
	}
	ss->n = from;
}

static void segments_free(struct segments *ss)
{
	truncate_segments(ss, 0);
	free(ss->v);
}

/* Is @name a segment's file name, rec-*.db or rec-*.db.partial (then *@partial)? */
static bool segment_name(const char *name, bool *partial)
{
	size_t n = strlen(name);

	if (strncmp(name, "rec-", 4))
		return false;
	*partial = n > 11 && !strcmp(name + n - 11, ".db.partial");
	return *partial || (n > 7 && !strcmp(name + n - 3, ".db"));
}

/* The segment files in @dir into @ss (path, mtime, partial), newest first by mtime. */
static int list_dir(const char *dir, struct segments *ss)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int err = 0;

	if (!d) {
		err = -errno;
		pr_warn("cannot read the directory %s: %s", dir, strerror(-err));
		return err;
	}
	while (!err && (de = readdir(d))) {
		struct segment *s;
		struct stat sb;
		bool partial;
		char *path;

		if (!segment_name(de->d_name, &partial))
			continue;
		if (asprintf(&path, "%s/%s", dir, de->d_name) < 0) {
			err = -ENOMEM;
			break;
		}
		/* Regular files only: a link could lead anywhere (root reads it). */
		if (lstat(path, &sb) || !S_ISREG(sb.st_mode)) {
			free(path);
			continue;
		}
		if (grow_array(&ss->v, &ss->cap, ss->n + 1, sizeof(*ss->v))) {
			free(path);
			err = -ENOMEM;
			break;
		}
		s = &ss->v[ss->n++];
		memset(s, 0, sizeof(*s));
		s->path = path;
		s->partial = partial;
		s->mtime = sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec / 1e9;
	}
	closedir(d);
	return err;
}

static int by_mtime_desc(const void *a, const void *b)
{
	const struct segment *x = a, *y = b;

	return (x->mtime < y->mtime) - (x->mtime > y->mtime);
}

static int by_start(const void *a, const void *b)
{
	const struct segment *x = a, *y = b;

	return (x->start > y->start) - (x->start < y->start);
}

/*
 * Check @s->path as a recording and read its meta (watch_id, start, end) and, when @last_ts
 * is not NULL, the latest second it sampled into *@last_ts (LLONG_MIN if none). Return 0,
 * or -errno with the reason said (by recording__open).
 */
static int read_segment(struct segment *s, long long *last_ts)
{
	sqlite3_stmt *st = NULL;
	sqlite3 *db = NULL;
	int err;

	err = recording__open_kind(s->path, RECORDING_SAMPLES, &db, NULL);
	if (err)
		return err;
	if (sqlite3_prepare_v2(
		    db, "SELECT key, value FROM meta WHERE key IN ('watch_id', 'start', 'end')", -1,
		    &st, NULL) != SQLITE_OK) {
		err = -EIO;
		goto cleanup;
	}
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *key = (const char *)sqlite3_column_text(st, 0);
		const char *val = (const char *)sqlite3_column_text(st, 1);

		if (!key || !val)
			continue;
		if (!strcmp(key, "watch_id")) {
			free(s->watch);
			s->watch = strndup(val, 64);
		} else {
			*(strcmp(key, "start") ? &s->end : &s->start) =
				sqlite3_column_double(st, 1);
		}
	}
	sqlite3_finalize(st);
	st = NULL;
	if (last_ts) {
		*last_ts = LLONG_MIN;
		if (sqlite3_prepare_v2(db, "SELECT max(ts) FROM sample_counts", -1, &st, NULL) !=
			    SQLITE_OK ||
		    sqlite3_step(st) != SQLITE_ROW) {
			err = -EIO;
			goto cleanup;
		}
		if (sqlite3_column_type(st, 0) != SQLITE_NULL)
			*last_ts = sqlite3_column_int64(st, 0);
	}
	s->uri = recording__readonly_uri(s->path);
	if (!s->uri)
		err = -ENOMEM;
cleanup:
	if (err == -EIO)
		pr_warn("cannot read the recording %s: %s", s->path, sqlite3_errmsg(db));
	sqlite3_finalize(st);
	recording__close(db);
	return err;
}

/* Is @s->path also the path of another entry of @ss? */
static bool listed(const struct segments *ss, const struct segment *s)
{
	for (size_t i = 0; i < ss->n; i++)
		if (&ss->v[i] != s && ss->v[i].path && !strcmp(ss->v[i].path, s->path))
			return true;
	return false;
}

/* The same watch (both without an id: each file is its own)? */
static bool same_watch(const struct segment *a, const struct segment *b)
{
	return a->watch && b->watch && !strcmp(a->watch, b->watch);
}

/* Is a file of the same watch with the same start among the first @n of @ss (a copy)? */
static bool copy_of_kept(const struct segments *ss, size_t n, const struct segment *s)
{
	for (size_t i = 0; i < n; i++)
		if (same_watch(&ss->v[i], s) && ss->v[i].start == s->start)
			return true;
	return false;
}

/*
 * Keep in @ss the files of the span: of the latest watch, those that hold seconds from
 * *@from_ts on, *@from_ts being the latest second sampled minus @last_s (whole seconds) when
 * @last_s > 0, else LLONG_MIN. The latest watch is the watch_id of the newest file (by its
 * last write) that has one; files newer than it without one are that watch's too (a segment
 * just begun, its meta not written yet); where no file has one (a probing before watch ids),
 * the newest file alone. Files that cannot be read are left out with their reason said;
 * *@others counts the files of other watches. Return the number kept, or -errno.
 */
static int choose(struct segments *ss, double last_s, long long *from_ts, size_t *others)
{
	long long t;
	size_t i, kept = 0, ref = SIZE_MAX;
	int err;

	*from_ts = LLONG_MIN;
	*others = 0;
	qsort(ss->v, ss->n, sizeof(*ss->v), by_mtime_desc);
	for (i = 0; i < ss->n; i++) {
		struct segment *s = &ss->v[i];
		bool need_end = last_s > 0 && *from_ts == LLONG_MIN;

		/* Its meta end is written before its last write: it ended before the span. */
		if (ref != SIZE_MAX && *from_ts != LLONG_MIN && !s->partial && s->mtime < *from_ts)
			break;
		if (s->partial && access(s->path, F_OK) && errno == ENOENT) {
			/* Complete since it was listed: under its own name, unless listed too. */
			s->path[strlen(s->path) - strlen(".partial")] = '\0';
			s->partial = false;
			if (listed(ss, s))
				continue;
		}
		err = read_segment(s, need_end ? &t : NULL);
		if (err == -ENOMEM)
			return err;
		if (err) {
			pr_warn("%s is left out", s->path);
			continue;
		}
		if (ref != SIZE_MAX && !same_watch(s, &ss->v[ref])) {
			(*others)++;
			continue;
		}
		if (copy_of_kept(ss, kept, s)) {
			pr_warn("%s is left out: a copy of a segment read already", s->path);
			continue;
		}
		if (ref != SIZE_MAX && *from_ts != LLONG_MIN && !s->partial && s->end < *from_ts)
			continue;
		if (&ss->v[kept] != s) {
			ss->v[kept] = *s;
			memset(s, 0, sizeof(*s));
		}
		if (ref == SIZE_MAX && ss->v[kept].watch)
			ref = kept;
		kept++;
		if (need_end && t != LLONG_MIN)
			*from_ts = t - (long long)last_s + 1; /* whole seconds, down */
	}
	if (ref == SIZE_MAX && kept > 1) {
		/* No watch ids: the newest file alone. */
		*others += kept - 1;
		kept = 1;
	}
	truncate_segments(ss, kept);
	qsort(ss->v, ss->n, sizeof(*ss->v), by_start);
	return (int)kept;
}

/* store__copy_window's check of each file once attached: it may have changed since. */
static int check_attached(sqlite3 *db, const char *file, void *ctx)
{
	const struct segments *ss = ctx;

	for (size_t i = 0; i < ss->n; i++)
		if (ss->v[i].uri == file)
			return recording__check_attached(db, "seg", ss->v[i].path);
	return -EINVAL;
}

/* Copy the files of @ss from @from_ts on into a new temporary database *@out. */
static int copy_span(const char *path, const struct segments *ss, long long from_ts, double last_s,
		     sqlite3 **out)
{
	const char **uris = NULL;
	sqlite3 *db = NULL;
	char *sql = NULL;
	double start, end;
	int rc, err;

	uris = calloc(ss->n ? ss->n : 1, sizeof(*uris));
	if (!uris)
		return -ENOMEM;
	for (size_t i = 0; i < ss->n; i++)
		uris[i] = ss->v[i].uri;
	/* "": a private temporary database, deleted when closed. URI: ATTACH reads the files
	 * through their read-only URIs. */
	rc = sqlite3_open_v2("", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI,
			     NULL);
	if (rc != SQLITE_OK) {
		pr_warn("cannot make a temporary database for %s: %s", path,
			db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		err = rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
		goto cleanup;
	}
	err = recording__distrust(db, path);
	if (!err && sqlite3_exec(db, "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF", NULL,
				 NULL, NULL) != SQLITE_OK)
		err = -EIO;
	err = err ?: store__copy_window(db, uris, (int)ss->n, from_ts, check_attached, (void *)ss);
	if (err)
		goto cleanup;
	/* The span's own times: the files' meta is the first one's. */
	start = from_ts != LLONG_MIN ? (double)from_ts : ss->v[0].start;
	end = ss->v[ss->n - 1].end;
	if (ss->v[ss->n - 1].partial || end < start) {
		sqlite3_stmt *st = NULL;

		/* Being written: up to the second after its latest. */
		if (sqlite3_prepare_v2(db, "SELECT max(ts) + 1 FROM sample_counts", -1, &st,
				       NULL) == SQLITE_OK &&
		    sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
			end = sqlite3_column_double(st, 0);
		sqlite3_finalize(st);
	}
	if (end < start)
		end = start;
	sql = sqlite3_mprintf("INSERT OR REPLACE INTO meta VALUES('start', %.6f);"
			      "INSERT OR REPLACE INTO meta VALUES('end', %.6f);"
			      "INSERT OR REPLACE INTO meta VALUES('duration', %.6f);"
			      "INSERT OR REPLACE INTO meta VALUES('window_source', %Q);"
			      "INSERT OR REPLACE INTO meta VALUES('window_files', %d);"
			      "INSERT OR REPLACE INTO meta VALUES('window_last', %.3f);",
			      start, end, end - start, path, (int)ss->n, last_s);
	if (!sql) {
		err = -ENOMEM;
		goto cleanup;
	}
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
		pr_warn("cannot write the span of %s: %s", path, sqlite3_errmsg(db));
		err = sqlite3_errcode(db) == SQLITE_FULL ? -ENOSPC : -EIO;
		goto cleanup;
	}
	err = recording__seal(db, path);
	if (!err) {
		*out = db;
		db = NULL;
	}
cleanup:
	sqlite3_free(sql);
	sqlite3_close(db);
	free(uris);
	return err;
}

int recwindow__open(const char *path, unsigned int accept, double last_s, sqlite3 **out,
		    unsigned int *kind)
{
	struct segments ss = {0};
	long long from_ts = LLONG_MIN;
	size_t others = 0;
	struct stat sb;
	bool dir;
	int n, err;

	dir = !stat(path, &sb) && S_ISDIR(sb.st_mode);
	if (!dir && !(last_s > 0))
		return recording__open_kind(path, accept, out, kind);
	if (!(accept & RECORDING_SAMPLES)) {
		pr_warn("%s is %s: give a backtrace snapshot file (probing backtrace -o FILE, or "
			"a watch's report, DIR/stall-*.db)",
			path, dir ? "a directory" : "read as a recording with --last");
		return -EPROTO;
	}
	if (dir) {
		err = list_dir(path, &ss);
		n = err ? err : choose(&ss, last_s, &from_ts, &others);
		if (!n) {
			pr_warn("%s holds no recording to read: -i takes a recording file, or the "
				"directory of a 'probing watch -o DIR' (its segments rec-*.db)",
				path);
			n = -ENOENT;
		}
	} else {
		long long t = LLONG_MIN;

		/* The one file: checked (and said what it is) as any, read once. */
		n = grow_array(&ss.v, &ss.cap, 1, sizeof(*ss.v)) ? -ENOMEM : 0;
		if (!n) {
			memset(&ss.v[0], 0, sizeof(ss.v[0]));
			ss.n = 1;
			ss.v[0].path = strdup(path);
			n = ss.v[0].path ? read_segment(&ss.v[0], &t) : -ENOMEM;
		}
		if (t != LLONG_MIN)
			from_ts = t - (long long)last_s + 1; /* whole seconds, down */
		n = n ?: 1;
	}
	if (n < 0) {
		err = n;
		goto cleanup;
	}
	if (others)
		pr_warn("%s: %zu segment%s of an earlier watch left out (read one with -i FILE)",
			path, others, others == 1 ? "" : "s");
	pr_debug("%s: %d segment%s from %s", path, n, n == 1 ? "" : "s", ss.v[0].path);
	err = copy_span(path, &ss, from_ts, last_s, out);
	if (!err && kind)
		*kind = RECORDING_SAMPLES;
cleanup:
	segments_free(&ss);
	return err;
}
