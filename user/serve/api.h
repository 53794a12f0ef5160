/* SPDX-License-Identifier: MIT */
/*
 * api: what each URL of `probing serve` does (docs/serve.md, "The HTTP API"). The pages
 * (assets.h) and a JSON API over them; the data comes from probing's own commands run as
 * child processes (base/subcmd.h): `query -f json-compact` for SQL on a recording or a live
 * process, `flamegraph` for the SVG, `list --all -f json`, `backtrace`, `export --format
 * chrome`. Recordings are named by their number in the server's list (-i FILE...), never by
 * a path from the request, and are only read.
 */
#ifndef PROBING_API_H
#define PROBING_API_H

#include "serve/http.h"

#define API_QUERY_TIMEOUT_S	30 /* default time limit of a query from the page */
#define API_MAX_QUERY_TIMEOUT_S 3600

/*
 * The recordings to serve (paths checked by the caller: recording__open), kept by pointer.
 * Call once, before http__start.
 */
void api__init(const char *const *files, int nfiles);

/* The http_handler of `probing serve`. */
void api__handle(struct http_req *req, struct http_resp *resp);

/* Stop every command still running for a request (the server is shutting down). */
void api__stop_all(void);

#endif
