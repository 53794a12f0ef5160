// SPDX-License-Identifier: MIT
/* assets: the embedded web files, by URL path. */
#include <string.h>

#include "base/util.h"
#include "serve/assets.h"

/* From user/serve/serve.mk: each file a C string named probing_web_<file name>. */
extern const char probing_web_index_html[], probing_web_app_js[], probing_web_style_css[];

static const struct asset assets[] = {
	{"/", "text/html; charset=utf-8", probing_web_index_html},
	{"/app.js", "text/javascript; charset=utf-8", probing_web_app_js},
	{"/style.css", "text/css; charset=utf-8", probing_web_style_css},
};

const struct asset *assets__find(const char *path)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(assets); i++)
		if (!strcmp(path, assets[i].path))
			return &assets[i];
	return NULL;
}
