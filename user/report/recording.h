/* SPDX-License-Identifier: MIT */
/*
 * recording: open a recording (the SQLite file `probing record` writes, see store.h and
 * docs/sql.md) for analysis, read-only. Works on a finished recording, on one being written
 * (WAL mode: readers see every committed flush) and on one whose recorder was killed (the
 * -wal file left next to it is read, never checkpointed into the file).
 */
#ifndef PROBING_RECORDING_H
#define PROBING_RECORDING_H

#include <sqlite3.h>

/*
 * Open @path read-only and check that it is a probing recording (it has the public views
 * `samples` and `frames`). On success store the connection in *@out (close it with
 * recording__close) and return 0. Nothing done through it, whatever SQL it runs, can create
 * or change a file: it is opened with SQLITE_OPEN_READONLY, never checkpoints a WAL left by
 * a killed recorder, and an authorizer refuses ATTACH and VACUUM INTO (which reach other
 * files; "not authorized"). TEMP tables and views work. The -shm file of a recording in WAL
 * mode is used as SQLite's readers do (and made if it was removed: the WAL cannot be read
 * without it).
 *
 * On failure print what failed, why and what to do (on stderr), and return
 *   -ENOENT      no such file (the message says how to make one: probing record)
 *   -EISDIR      @path is a directory
 *   -EACCES      no permission to read it
 *   -EINVAL      not a SQLite database
 *   -EPROTO      a SQLite database but not a probing recording
 *   -EIO         any other SQLite failure
 */
int recording__open(const char *path, sqlite3 **out);

/* What a file holds (recording__open_kind). */
#define RECORDING_SAMPLES   1u /* a recording: `probing record` */
#define RECORDING_BACKTRACE 2u /* a backtrace snapshot: `probing backtrace -o` (docs/sql.md) */

/*
 * As recording__open, but accept the kinds of file in @accept (RECORDING_*) and say which
 * @path is in *@kind (may be NULL). A file of another kind is refused with -EPROTO and a
 * message saying what it is and what reads it.
 */
int recording__open_kind(const char *path, unsigned int accept, sqlite3 **out, unsigned int *kind);

/*
 * Attach the recording open on @db once more, read-only, as @schema (the one ATTACH its
 * authorizer allows). Return 0, or -errno (the reason is in sqlite3_errmsg(@db)).
 */
int recording__attach_self(sqlite3 *db, const char *schema);

/*
 * What recording__open does to every connection, for a connection of one's own that reads
 * recordings (report/recwindow.c). recording__distrust: the files it reads are untrusted
 * (defensive mode, their schemas not trusted, no extensions, no fts3_tokenizer).
 * recording__seal: from then on no ATTACH, VACUUM INTO or process-wide pragma (the
 * authorizer). Each returns 0, or -EIO with the reason printed for @path.
 */
int recording__distrust(sqlite3 *db, const char *path);
int recording__seal(sqlite3 *db, const char *path);

/*
 * Is the database attached to @db as @schema (read from @path) a recording probing can read:
 * its public views there, each of probing's own tables an ordinary table (no view, virtual
 * table or generated column in its place)? Return 0, or -EPROTO / -EIO with the reason
 * printed.
 */
int recording__check_attached(sqlite3 *db, const char *schema, const char *path);

/*
 * "file:PATH?mode=ro", @path percent-encoded: what ATTACH opens read-only on a connection
 * opened with SQLITE_OPEN_URI. Free with free(); NULL when out of memory.
 */
char *recording__readonly_uri(const char *path);

/* Close a connection from recording__open. NULL is a no-op. */
void recording__close(sqlite3 *db);

#endif
