// SPDX-License-Identifier: MIT
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/bmap.h"
#include "base/strpool.h"

struct strpool {
	struct bmap *map; /* string -> (uintptr_t) malloc'd copy */
};

struct strpool *strpool__new(void)
{
	struct strpool *sp = calloc(1, sizeof(*sp));

	if (sp && !(sp->map = bmap__new())) {
		free(sp);
		return NULL;
	}
	return sp;
}

static int free_copy(const void *key, size_t len, uint64_t *value, void *ctx)
{
	free((void *)(uintptr_t)*value);
	return 0;
}

void strpool__free(struct strpool *sp)
{
	if (!sp)
		return;
	bmap__for_each(sp->map, free_copy, NULL);
	bmap__free(sp->map);
	free(sp);
}

const char *strpool__intern(struct strpool *sp, const char *s)
{
	size_t len;
	uint64_t *slot;
	char *copy;
	int inserted;

	if (!s)
		return NULL;
	len = strlen(s);
	slot = bmap__upsert(sp->map, s, len, 0, &inserted);
	if (!slot)
		return NULL;
	if (inserted) {
		copy = malloc(len + 1);
		if (!copy)
			return NULL; /* the slot stays 0 and is filled on the next attempt */
		memcpy(copy, s, len + 1);
		*slot = (uintptr_t)copy;
	} else if (!*slot) {
		copy = strdup(s);
		if (!copy)
			return NULL;
		*slot = (uintptr_t)copy;
	}
	return (const char *)(uintptr_t)*slot;
}
