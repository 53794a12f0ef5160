/* SPDX-License-Identifier: MIT */
/*
 * segdir: the directory of a watch (probing watch -o DIR): the recording it keeps, as segment
 * files of one rotating store (rec-TIME-N.db, the one being written rec-TIME-N.db.partial),
 * the stall reports (stall-TIME-N.db), and the lock that says a watch runs there
 * (watch.lock, holding its pid). Old segments go as new ones come: older than --keep, or
 * beyond --max-size in all. Only the segments of this watch are counted and removed; files
 * of an earlier watch in DIR are left alone.
 */
#ifndef PROBING_SEGDIR_H
#define PROBING_SEGDIR_H

#include <stdint.h>
#include <sys/types.h>

struct segdir;

#define SEGDIR_LOCK "watch.lock"

/*
 * Use @dir (created, mode 0750, if missing), taking its lock: a second watch on the same
 * directory is refused. Return 0 and *@out, or -errno with the reason said for @cmd.
 */
int segdir__open(const char *cmd, const char *dir, struct segdir **out);

/* Release the lock and free (files stay). NULL is a no-op. */
void segdir__free(struct segdir *sd);

/*
 * The name of a new segment (a recording, without .partial) started now, into @buf; it
 * becomes the current one, and the one before it complete. 0 or -ENAMETOOLONG.
 */
int segdir__next_segment(struct segdir *sd, char *buf, size_t size);

/* The name of a new report file into @buf (stall-TIME-N.db). 0 or -ENAMETOOLONG. */
int segdir__next_report(struct segdir *sd, char *buf, size_t size);

/*
 * Remove the oldest complete segments while the oldest ended more than @keep_s seconds ago,
 * or the segments (their files with -wal, the current one included) take more than
 * @max_bytes, the current one counted as at least half of it (it is rotated at a quarter:
 * room for it to grow, and for a late rotation). The current segment is never removed; its
 * files are measured once per call. Return the number removed.
 */
int segdir__prune(struct segdir *sd, double keep_s, uint64_t max_bytes);

/* Bytes the segments take now (the current one with its -wal; a complete one measured until
 * it is settled, then kept). */
uint64_t segdir__bytes(struct segdir *sd);

/* Bytes of the segment being written (its file and side files), 0 if none. */
uint64_t segdir__current_bytes(struct segdir *sd);

/*
 * The segments that hold data from unix second @from on, oldest first, the current one
 * (its .partial name) last: *@files points into @sd (valid until the next call that changes
 * it). Return their number.
 */
int segdir__since(struct segdir *sd, double from, const char *const **files);

/* Remove the oldest reports beyond @max. */
void segdir__prune_reports(struct segdir *sd, int max);

/*
 * The pid of the watch that holds @dir's lock, or -ESRCH when none runs there, or -errno
 * said for @cmd.
 */
pid_t segdir__watcher(const char *cmd, const char *dir);

#endif
