/* SPDX-License-Identifier: MIT */
/*
 * jsonq: read fields of small JSON documents (the agent's replies) with SQLite's JSON
 * functions, so probing needs no JSON parser of its own. Paths are SQLite JSON paths:
 * "$.name", "$.rows[2]", "$[0]".
 */
#ifndef PROBING_JSONQ_H
#define PROBING_JSONQ_H

#include <stdbool.h>

/*
 * The value at @path as text (a string's text unescaped, a number's digits, an object or
 * array as JSON). Return it malloc'd (caller frees), or NULL if absent, JSON null, or the
 * document is not valid JSON (errno = ENOENT / EINVAL / ENOMEM).
 */
char *jq_text(const char *json, const char *path);

/*
 * The value at @path as JSON text (a string with its quotes and escapes, an object or array as
 * JSON, a number's digits, null), malloc'd; NULL if absent or the document is not valid JSON
 * (errno = ENOENT / EINVAL / ENOMEM). For echoing a value as it came (a JSON-RPC id).
 */
char *jq_json(const char *json, const char *path);

/*
 * The JSON type of the value at @path: "null", "true", "false", "integer", "real", "text",
 * "array" or "object" (static strings, as SQLite's json_type names them); NULL if absent or
 * the document is not valid JSON.
 */
const char *jq_type(const char *json, const char *path);

/*
 * The first member name of the object @json that is not in @allowed (NULL-terminated), malloc'd;
 * NULL when there is none (or @json is not an object).
 */
char *jq_unknown_key(const char *json, const char *const *allowed);

/* The integer/boolean at @path into *@out. Return 0 or -ENOENT (absent, null, not a number). */
int jq_int(const char *json, const char *path, long long *out);
int jq_double(const char *json, const char *path, double *out);
/* true if @path holds JSON true (or a non-zero number). */
bool jq_bool(const char *json, const char *path);

/*
 * For each element of the array at @array_path, call @fn with the @n values found at the
 * element-relative @paths ("$.name", "$[1]"), as text or NULL; stop early when @fn returns
 * non-zero and return that. Return 0, or -EINVAL for a document that is not JSON.
 */
int jq_each(const char *json, const char *array_path, const char *const *paths, int n,
	    int (*fn)(char **vals, int n, void *ctx), void *ctx);

/*
 * Append @s (NULL: "") to @out as a JSON string literal, escaped as json_string (escape.h)
 * does. 0 or -ENOMEM.
 */
struct strbuf;
int jq_quote(struct strbuf *out, const char *s);

#endif
