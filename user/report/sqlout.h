/* SPDX-License-Identifier: MIT */
/*
 * sqlout: run SQL on an open SQLite connection and print the rows — as an aligned table for
 * people, CSV (RFC 4180) or JSON for programs. It does not care where the connection comes
 * from: a recording (recording.h) or any other source of tables.
 *
 *   table   psql-like: a header, a rule, one line per row, numbers right-aligned, NULL shown
 *           as NULL, line breaks and other control characters as \n, \t, \xNN; a footer
 *           "(N rows)". Widths are measured on the first 10000 rows; longer results stream
 *           on with those widths.
 *   csv     RFC 4180: CRLF line ends, fields quoted when they hold a comma, quote, CR or LF;
 *           NULL is an empty field; BLOBs as hex; a header row unless --no-header.
 *   json    an array of objects, one per row, column names as keys; INTEGER and REAL stay
 *           numbers (a REAL always has a '.' or an exponent), NULL is null, TEXT a string,
 *           BLOB a hex string. The header option does not apply.
 *   json-compact  one object per statement, {"columns": [names in order], "rows": [[values in
 *           column order], ...]}, values as in json, each row on a line of its own (what
 *           programs such as `probing serve` want: column order and duplicate names kept).
 * Several statements run in order; each one that returns columns prints its own result
 * (tables and CSV separated by a blank line, JSON arrays one after the other on new lines).
 */
#ifndef PROBING_SQLOUT_H
#define PROBING_SQLOUT_H

#include <stdbool.h>
#include <stdio.h>
#include <sqlite3.h>

enum sqlout_format {
	SQLOUT_TABLE,
	SQLOUT_CSV,
	SQLOUT_JSON,
	SQLOUT_JSON_COMPACT,
};

struct sqlout_options {
	enum sqlout_format format;
	bool no_header;
	int time_limit_ms; /* stop the SQL after this long (all statements together); 0 = never */
};

/* "table" / "csv" / "json" / "json-compact" -> *@out; return 0 or -EINVAL. */
int sqlout__parse_format(const char *s, enum sqlout_format *out);

/*
 * Run the statements of @sql on @db in order and print their rows to @out. Stop at the first
 * error and print it on stderr: SQLite's message, where in @sql it is (line, column and a
 * caret), and for an unknown table the tables and views @db has. With @o->time_limit_ms, SQL
 * still running after that long is interrupted (what was printed stays) and reported.
 * Return 0, -EINVAL (an SQL error), -ETIMEDOUT (the time limit), -EPIPE/-EIO (the output could
 * not be written) or -ENOMEM.
 */
int sqlout__run(sqlite3 *db, const char *sql, const struct sqlout_options *o, FILE *out);

#endif
