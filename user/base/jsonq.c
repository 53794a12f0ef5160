// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include "base/escape.h"
#include "base/jsonq.h"
#include "base/util.h"

/*
 * One private in-memory connection, for the JSON functions only, opened once; serialized
 * (FULLMUTEX): the servers' threads read their requests with it at the same time.
 */
static sqlite3 *db;
static pthread_once_t db_once = PTHREAD_ONCE_INIT;

static void open_db(void)
{
	if (sqlite3_open_v2(":memory:", &db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY | SQLITE_OPEN_FULLMUTEX,
			    NULL) != SQLITE_OK) {
		sqlite3_close(db);
		db = NULL;
	}
}

static sqlite3_stmt *prepare(const char *sql)
{
	sqlite3_stmt *st = NULL;

	pthread_once(&db_once, open_db);
	if (!db)
		return NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return NULL;
	return st;
}

/* Step "SELECT json_valid(?1), <expr on ?1, ?2>" once. */
static sqlite3_stmt *eval1(const char *json, const char *path, const char *expr)
{
	char sql[128];
	sqlite3_stmt *st;

	snprintf(sql, sizeof(sql), "SELECT json_valid(?1), %s", expr);
	st = prepare(sql);
	if (!st) {
		errno = ENOMEM;
		return NULL;
	}
	sqlite3_bind_text(st, 1, json ? json : "", -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_ROW || !sqlite3_column_int(st, 0)) {
		sqlite3_finalize(st);
		errno = EINVAL;
		return NULL;
	}
	return st;
}

char *jq_text(const char *json, const char *path)
{
	sqlite3_stmt *st = eval1(json, path, "json_extract(?1, ?2)");
	const unsigned char *t;
	char *out = NULL;

	if (!st)
		return NULL;
	if (sqlite3_column_type(st, 1) == SQLITE_NULL) {
		errno = ENOENT;
	} else {
		t = sqlite3_column_text(st, 1);
		out = strdup(t ? (const char *)t : "");
		if (!out)
			errno = ENOMEM;
	}
	sqlite3_finalize(st);
	return out;
}

int jq_int(const char *json, const char *path, long long *out)
{
	sqlite3_stmt *st = eval1(json, path, "json_extract(?1, ?2)");
	int t, err = -ENOENT;

	if (!st)
		return -ENOENT;
	t = sqlite3_column_type(st, 1);
	if (t == SQLITE_INTEGER || t == SQLITE_FLOAT) {
		*out = sqlite3_column_int64(st, 1);
		err = 0;
	}
	sqlite3_finalize(st);
	return err;
}

int jq_double(const char *json, const char *path, double *out)
{
	sqlite3_stmt *st = eval1(json, path, "json_extract(?1, ?2)");
	int t, err = -ENOENT;

	if (!st)
		return -ENOENT;
	t = sqlite3_column_type(st, 1);
	if (t == SQLITE_INTEGER || t == SQLITE_FLOAT) {
		*out = sqlite3_column_double(st, 1);
		err = 0;
	}
	sqlite3_finalize(st);
	return err;
}

char *jq_json(const char *json, const char *path)
{
	/* SQLite's -> gives the JSON text of the value (3.38+); NULL when the path is absent. */
	sqlite3_stmt *st = eval1(json, path, "?1 -> ?2");
	const unsigned char *t;
	char *out = NULL;

	if (!st)
		return NULL;
	t = sqlite3_column_text(st, 1);
	if (!t) {
		errno = ENOENT;
	} else {
		out = strdup((const char *)t);
		if (!out)
			errno = ENOMEM;
	}
	sqlite3_finalize(st);
	return out;
}

const char *jq_type(const char *json, const char *path)
{
	static const char *const types[] = {"null", "true", "false", "integer",
					    "real", "text", "array", "object"};
	sqlite3_stmt *st = eval1(json, path, "json_type(?1, ?2)");
	const char *t, *out = NULL;
	size_t i;

	if (!st)
		return NULL;
	t = (const char *)sqlite3_column_text(st, 1);
	for (i = 0; t && i < sizeof(types) / sizeof(types[0]) && !out; i++)
		if (!strcmp(t, types[i]))
			out = types[i];
	sqlite3_finalize(st);
	return out;
}

char *jq_unknown_key(const char *json, const char *const *allowed)
{
	sqlite3_stmt *st = prepare("SELECT key FROM json_each(?1) WHERE json_type(?1) = 'object'");
	const char *const *a;
	char *out = NULL;

	if (!st)
		return NULL;
	sqlite3_bind_text(st, 1, json ? json : "{}", -1, SQLITE_STATIC);
	while (!out && sqlite3_step(st) == SQLITE_ROW) {
		const char *key = (const char *)sqlite3_column_text(st, 0);

		for (a = allowed; key && *a && strcmp(*a, key); a++)
			;
		if (key && !*a)
			out = strdup(key);
	}
	sqlite3_finalize(st);
	return out;
}

bool jq_bool(const char *json, const char *path)
{
	long long v = 0;

	return !jq_int(json, path, &v) && v != 0;
}

int jq_each(const char *json, const char *array_path, const char *const *paths, int n,
	    int (*fn)(char **vals, int n, void *ctx), void *ctx)
{
	struct strbuf sql = {0};
	sqlite3_stmt *st = NULL;
	char **vals = NULL;
	int i, rc, err = 0;

	vals = calloc(n ? n : 1, sizeof(*vals));
	if (!vals || sb_puts(&sql, "SELECT ")) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < n; i++)
		if (sb_printf(&sql, "%sjson_extract(json_quote(value), ?%d)", i ? ", " : "",
			      i + 3)) {
			err = -ENOMEM;
			goto cleanup;
		}
	if (!n && sb_puts(&sql, "1"))
		goto cleanup;
	if (sb_puts(&sql, " FROM json_each(?1, ?2)")) {
		err = -ENOMEM;
		goto cleanup;
	}
	st = prepare(sb_str(&sql));
	if (!st) {
		err = -ENOMEM;
		goto cleanup;
	}
	sqlite3_bind_text(st, 1, json ? json : "", -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, array_path, -1, SQLITE_STATIC);
	for (i = 0; i < n; i++)
		sqlite3_bind_text(st, i + 3, paths[i], -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		for (i = 0; i < n; i++) {
			const unsigned char *t = sqlite3_column_text(st, i);

			vals[i] = sqlite3_column_type(st, i) == SQLITE_NULL ? NULL : (char *)t;
		}
		err = fn(vals, n, ctx);
		if (err)
			goto cleanup;
	}
	if (rc != SQLITE_DONE)
		err = -EINVAL; /* malformed JSON makes json_each fail */
cleanup:
	sqlite3_finalize(st);
	sb_free(&sql);
	free(vals);
	return err;
}

int jq_quote(struct strbuf *out, const char *s)
{
	return json_string(out, s ? s : "", s ? strlen(s) : 0);
}
