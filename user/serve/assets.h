/* SPDX-License-Identifier: MIT */
/*
 * assets: the pages of `probing serve` — user/serve/web/index.html, app.js, style.css, real
 * files embedded in the binary at build time (user/serve/serve.mk), so the server needs no
 * file at run time and the browser fetches nothing from elsewhere.
 */
#ifndef PROBING_ASSETS_H
#define PROBING_ASSETS_H

struct asset {
	const char *path; /* the URL path: "/", "/app.js" */
	const char *type; /* its Content-Type */
	const char *data; /* the file, NUL-terminated */
};

/* The asset served at @path, or NULL. */
const struct asset *assets__find(const char *path);

#endif
