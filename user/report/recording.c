// SPDX-License-Identifier: MIT
/*
 * Opening a recording for reading. The checks happen in the order a user's mistakes do: a
 * wrong path, a file that is something else entirely, a SQLite file from another program.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/util.h"
#include "report/recording.h"

static const char record_hint[] = "Make one with 'sudo probing record -p PID -o %s' or "
				  "'sudo probing record -o %s -- COMMAND ARGS...'.";
static const char wrong_file_hint[] = "Check the path: recordings are the files 'probing record -o "
				      "FILE' writes (probing.db by default).";

/* Set while recording__attach_self runs: the one ATTACH the authorizer lets through. */
static bool attaching_self;

/*
 * The authorizer of every recording connection. The connection is read-only
 * (SQLITE_OPEN_READONLY: every write to the recording fails), but two statements reach other
 * files: ATTACH (of a file that exists: SQLite opens it read-only too, but a database in WAL
 * mode gets -wal and -shm files made next to it) and VACUUM INTO, which creates its output
 * file even on a read-only connection (it attaches that file read-write internally, which is
 * authorized as an ATTACH). Both are refused; TEMP tables and views stay allowed. So are the
 * pragmas that change the whole process rather than this connection (temp_store_directory,
 * data_store_directory: where any later temporary file of any connection goes, as root), and
 * fts3_tokenizer(), which hands out and takes the addresses of C functions.
 */
static int authorize(void *ctx, int action, const char *a, const char *b, const char *db,
		     const char *trigger)
{
	if (action == SQLITE_ATTACH && !attaching_self)
		return SQLITE_DENY;
	if (action == SQLITE_PRAGMA && a &&
	    (!strcasecmp(a, "temp_store_directory") || !strcasecmp(a, "data_store_directory")))
		return SQLITE_DENY;
	if (action == SQLITE_FUNCTION && b && !strcasecmp(b, "fts3_tokenizer"))
		return SQLITE_DENY;
	return SQLITE_OK;
}

/*
 * probing's own tables (docs/sql.md): what its commands read. In a file they must be ordinary
 * tables: a view (which could compute anything, without end), a virtual table or a generated
 * column in their place is a file made to look like a recording.
 */
static const char *const own_tables[] = {
	"meta",		"processes",	 "threads",	    "frame_defs",   "stacks",
	"stack_frames", "sample_counts", "collectives_raw", "bt_processes", "bt_threads",
	"bt_frames",	"crash",	 "bt_locals",	    "torch_trace",  NULL,
};

/*
 * 0 if each of probing's tables that the database @schema of @db has is an ordinary table;
 * else say which is not.
 */
static int check_own_tables(sqlite3 *db, const char *schema, const char *path, const char *what)
{
	sqlite3_stmt *st = NULL, *gen = NULL;
	struct strbuf names = {0};
	char *sql;
	int rc, err = 0, i;

	sql = sqlite3_mprintf("SELECT name, type, sql LIKE 'CREATE VIRTUAL%%' FROM \"%w\"."
			      "sqlite_schema WHERE name IN (SELECT value FROM json_each(?1))",
			      schema);
	rc = sql ? sqlite3_prepare_v2(db, sql, -1, &st, NULL) : SQLITE_NOMEM;
	sqlite3_free(sql);
	if (rc == SQLITE_OK) {
		err = sb_puts(&names, "[");
		for (i = 0; own_tables[i] && !err; i++)
			err = sb_printf(&names, "%s\"%s\"", i ? "," : "", own_tables[i]);
		err = err ?: sb_puts(&names, "]");
		if (!err)
			rc = sqlite3_bind_text(st, 1, sb_str(&names), -1, SQLITE_STATIC);
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(db,
					"SELECT name FROM pragma_table_xinfo(?1, ?2) WHERE hidden"
					" IN (2, 3) LIMIT 1",
					-1, &gen, NULL);
	while (!err && rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);
		const char *type = (const char *)sqlite3_column_text(st, 1);

		if (!type || strcmp(type, "table") || sqlite3_column_int(st, 2)) {
			pr_warn("%s is not a %s probing can read: its '%s' is %s, where probing "
				"writes a table (a file made to look like a recording; probing "
				"reads only its own tables)",
				path, what, name,
				!type			   ? "of no type"
				: !strcmp(type, "table")   ? "a virtual table"
				: !strcmp(type, "view")	   ? "a view"
				: !strcmp(type, "trigger") ? "a trigger"
				: !strcmp(type, "index")   ? "an index"
							   : "not a table");
			err = -EPROTO;
			break;
		}
		sqlite3_reset(gen);
		sqlite3_bind_text(gen, 1, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(gen, 2, schema, -1, SQLITE_STATIC);
		if (sqlite3_step(gen) == SQLITE_ROW) {
			pr_warn("%s is not a %s probing can read: its table '%s' has a generated "
				"column ('%s'), which probing never writes",
				path, what, name, sqlite3_column_text(gen, 0));
			err = -EPROTO;
		}
		rc = SQLITE_OK;
	}
	if (!err && rc != SQLITE_DONE) {
		pr_warn("cannot read the %s %s: %s", what, path, sqlite3_errmsg(db));
		err = -EIO;
	}
	sqlite3_finalize(st);
	sqlite3_finalize(gen);
	sb_free(&names);
	return err;
}

/*
 * How many of the public views (docs/design.md §4) the database @schema of @db has; -1 if it
 * cannot be read.
 */
static int count_views(sqlite3 *db, const char *schema)
{
	sqlite3_stmt *st = NULL;
	char *sql;
	int rc, n = -1;

	sql = sqlite3_mprintf("SELECT count(*) FROM \"%w\".sqlite_schema"
			      " WHERE type = 'view' AND name IN ('samples', 'frames')",
			      schema);
	rc = sql ? sqlite3_prepare_v2(db, sql, -1, &st, NULL) : SQLITE_NOMEM;
	sqlite3_free(sql);
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return n;
}

/* Is @db a backtrace snapshot (meta 'kind' = 'backtrace')? */
static bool is_snapshot(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;
	bool yes = false;

	if (sqlite3_prepare_v2(db,
			       "SELECT value FROM meta WHERE key = 'kind' AND value = 'backtrace'",
			       -1, &st, NULL) == SQLITE_OK)
		yes = sqlite3_step(st) == SQLITE_ROW;
	sqlite3_finalize(st);
	return yes;
}

int recording__distrust(sqlite3 *db, const char *path)
{
	/*
	 * The file is untrusted (SQLite's "Defense against dark arts"): defensive mode (no
	 * writable schema, no corrupting pragmas), its schema not trusted (its views and
	 * triggers may call only functions marked harmless), no extensions, no fts3_tokenizer
	 * pointers.
	 */
	if (sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL) != SQLITE_OK ||
	    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL) != SQLITE_OK ||
	    sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL) != SQLITE_OK ||
	    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, 0, NULL) != SQLITE_OK) {
		pr_warn("cannot open the recording %s: %s", path, sqlite3_errmsg(db));
		return -EIO;
	}
	return 0;
}

int recording__seal(sqlite3 *db, const char *path)
{
	/* Nothing reaches other files: no ATTACH, no VACUUM INTO, no process-wide pragmas. */
	if (sqlite3_set_authorizer(db, authorize, NULL) != SQLITE_OK) {
		pr_warn("cannot open the recording %s: %s", path, sqlite3_errmsg(db));
		return -EIO;
	}
	return 0;
}

int recording__check_attached(sqlite3 *db, const char *schema, const char *path)
{
	int n = count_views(db, schema);

	if (n < 0) {
		pr_warn("cannot read the recording %s: %s", path, sqlite3_errmsg(db));
		return -EIO;
	}
	if (n != 2) {
		pr_warn("%s is not a probing recording (it has no 'samples' and 'frames' views)",
			path);
		return -EPROTO;
	}
	return check_own_tables(db, schema, path, "recording");
}

char *recording__readonly_uri(const char *path)
{
	static const char hex[] = "0123456789ABCDEF";
	struct strbuf sb = {0};
	char *out;
	int err = sb_puts(&sb, "file:");

	for (const unsigned char *p = (const unsigned char *)path; *p && !err; p++) {
		char esc[4] = {'%', hex[*p >> 4], hex[*p & 15], 0};

		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("/._-~", *p))
			err = sb_append(&sb, (const char *)p, 1);
		else
			err = sb_puts(&sb, esc);
	}
	err = err ?: sb_puts(&sb, "?mode=ro");
	out = err ? NULL : strdup(sb_str(&sb));
	sb_free(&sb);
	return out;
}

int recording__open(const char *path, sqlite3 **out)
{
	return recording__open_kind(path, RECORDING_SAMPLES, out, NULL);
}

int recording__open_kind(const char *path, unsigned int accept, sqlite3 **out, unsigned int *kind)
{
	char name[PATH_MAX + 8];
	sqlite3 *db = NULL;
	struct stat sb;
	/* Only snapshots wanted (backtrace -i): messages say so. */
	bool snap = accept == RECORDING_BACKTRACE;
	const char *what = snap ? "backtrace snapshot" : "recording";
	int rc, err, n;

	if (stat(path, &sb)) {
		err = -errno;
		if (err == -ENOENT) {
			char partial[PATH_MAX + 16];

			pr_warn("cannot open the %s %s: no such file", what, path);
			snprintf(partial, sizeof(partial), "%s.partial", path);
			if (!access(partial, F_OK))
				pr_warn("%s holds a recording still being written, or one whose "
					"recorder was killed: read that ('-i %s')",
					partial, partial);
			else if (snap)
				pr_warn("Make one with 'probing backtrace -p PID -o %s'.", path);
			else
				pr_warn(record_hint, path, path);
		} else {
			pr_warn("cannot open the %s %s: %s", what, path, strerror(-err));
		}
		return err;
	}
	if (S_ISDIR(sb.st_mode)) {
		char lock[PATH_MAX + 16];

		snprintf(lock, sizeof(lock), "%s/watch.lock", path);
		if (!access(lock, F_OK))
			/* A watch's directory: where its reports are, and who reads it whole. */
			pr_warn("%s is the directory of a 'probing watch': read its reports "
				"(%s/stall-*.db; %s/latest-report names the latest) with -i FILE; "
				"flamegraph, query and export read the directory itself",
				path, path, path);
		else
			pr_warn("cannot open the %s %s: it is a directory; give the %s file%s%s%s",
				what, path, what, snap ? "" : " (e.g. ", snap ? "" : path,
				snap ? "" : "/probing.db)");
		return -EISDIR;
	}
	if (S_ISREG(sb.st_mode) && sb.st_size == 0) {
		/* SQLite would take an empty file for an empty database. */
		pr_warn("%s is not a probing %s: the file is empty", path, what);
		if (!snap)
			pr_warn("%s", wrong_file_hint);
		return -EINVAL;
	}
	if (access(path, R_OK)) {
		err = -errno;
		pr_warn("cannot read the recording %s: %s", path, strerror(-err));
		return err;
	}

	/*
	 * READONLY: every write, including a user's DELETE in 'probing query', fails with
	 * SQLITE_READONLY. NOMUTEX: one thread uses the connection; no locking per call.
	 * SQLite may be built to read "file:..." names as URIs (Debian's is): such a relative
	 * path is given as "./file:...", which is not one.
	 */
	snprintf(name, sizeof(name), "%s%s", strncmp(path, "file:", 5) ? "" : "./", path);
	rc = sqlite3_open_v2(name, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		pr_warn("cannot open the recording %s: %s", path,
			db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		err = rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
		goto cleanup;
	}
	/*
	 * A recorder that was killed leaves its -wal file. Reading it is what makes its last
	 * flushes visible; the last connection to close would normally checkpoint it into the
	 * database file, which a read-only connection must not do. Be explicit about it.
	 */
	sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
	if (recording__distrust(db, path) || recording__seal(db, path)) {
		err = -EIO;
		goto cleanup;
	}
	/* The recorder holds the write lock for the length of one flush at most. */
	sqlite3_busy_timeout(db, 5000);

	n = count_views(db, "main");
	if (n < 0) {
		rc = sqlite3_errcode(db);
		if (rc == SQLITE_NOTADB) {
			pr_warn("%s is not a probing %s: it is not a SQLite database", path, what);
			if (!snap)
				pr_warn("%s", wrong_file_hint);
			err = -EINVAL;
		} else {
			pr_warn("cannot read the recording %s: %s", path, sqlite3_errmsg(db));
			err = -EIO;
		}
		goto cleanup;
	}
	err = check_own_tables(db, "main", path, what);
	if (err)
		goto cleanup;
	/* A watch report is both (a snapshot with the recording of the last minutes): read as
	 * a recording where one is accepted, else as the snapshot. */
	if (is_snapshot(db) && (n != 2 || !(accept & RECORDING_SAMPLES))) {
		if (!(accept & RECORDING_BACKTRACE)) {
			pr_warn("%s is a backtrace snapshot (probing backtrace -o), not a "
				"recording: "
				"read it with 'probing backtrace -i %s' or 'probing query -i %s'",
				path, path, path);
			err = -EPROTO;
			goto cleanup;
		}
		if (kind)
			*kind = RECORDING_BACKTRACE;
		*out = db;
		return 0;
	}
	if (n != 2) {
		pr_warn("%s is a SQLite database but not a probing recording (it has no 'samples' "
			"and 'frames' views)",
			path);
		pr_warn("%s", wrong_file_hint);
		err = -EPROTO;
		goto cleanup;
	}
	if (!(accept & RECORDING_SAMPLES)) {
		pr_warn("%s is a recording (probing record), not a backtrace snapshot: read it "
			"with "
			"'probing flamegraph -i %s' or 'probing query -i %s'; snapshots are made "
			"by "
			"'probing backtrace -p PID -o FILE'",
			path, path, path);
		err = -EPROTO;
		goto cleanup;
	}
	if (kind)
		*kind = RECORDING_SAMPLES;
	*out = db;
	return 0;
cleanup:
	sqlite3_close(db);
	return err;
}

int recording__attach_self(sqlite3 *db, const char *schema)
{
	const char *file = sqlite3_db_filename(db, "main");
	sqlite3_stmt *st = NULL;
	int rc;

	if (!file || !*file)
		return -EINVAL;
	attaching_self = true;
	rc = sqlite3_prepare_v2(db, "ATTACH ?1 AS ?2", -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(st, 1, file, -1, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(st, 2, schema, -1, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db);
	attaching_self = false;
	sqlite3_finalize(st);
	return rc == SQLITE_OK ? 0 : rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

void recording__close(sqlite3 *db)
{
	sqlite3_close(db);
}
