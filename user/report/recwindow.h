/* SPDX-License-Identifier: MIT */
/*
 * recwindow: a span of recording read as one recording — the recording a watch directory
 * keeps (probing watch -o DIR: segment files of one rotating store, docs/watch.md), or the
 * last seconds of it or of one recording file. The rows of the span are copied into a
 * private temporary database (SQLite's own, in its temporary directory, gone when the
 * connection closes), which the commands read as they read a file.
 */
#ifndef PROBING_RECWINDOW_H
#define PROBING_RECWINDOW_H

#include <sqlite3.h>

/*
 * Open @path for reading as recording__open_kind(@path, @accept, ...) does, and besides:
 *   - @path a watch directory: the segments of the latest watch that wrote into it
 *     (rec-*.db, and rec-*.db.partial, the one being written or left by a killed watch),
 *     as one recording; segments of earlier watches there are left out (said on stderr);
 *   - @last_s > 0: only the last @last_s seconds (whole seconds, back from the latest second
 *     sampled) of the directory's recording or of the recording file @path.
 * Every segment is checked as recording__open checks a file (a probing recording whose own
 * tables are ordinary tables), before and again once attached, read-only; one that cannot
 * be read is left out with the reason said. The copy's meta says the span: start, end,
 * duration, window_source (@path), window_files (how many files), window_last (@last_s).
 * What SQL run on the copy changes is lost when it is closed (recording__close); ATTACH
 * and VACUUM INTO are refused as on a file. With @last_s 0 and a file, this is
 * recording__open_kind. A directory is read only where RECORDING_SAMPLES is in @accept.
 * Return 0 and *@out (*@kind, if not NULL, is what was opened), or -errno with what failed
 * printed: -ENOENT for a directory without segments, and those of recording__open_kind.
 */
int recwindow__open(const char *path, unsigned int accept, double last_s, sqlite3 **out,
		    unsigned int *kind);

#endif
