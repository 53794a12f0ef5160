/* SPDX-License-Identifier: MIT */
/*
 * bmap: a hash map from byte-string keys to 64-bit values. Keys are copied into the map (its
 * entries or its arena), so callers may pass keys built on the stack. Used for interning (frames,
 * stacks), symbol caches and sample counters.
 */
#ifndef PROBING_BMAP_H
#define PROBING_BMAP_H

#include <stddef.h>
#include <stdint.h>

struct bmap;

/* New empty map, or NULL (errno = ENOMEM). */
struct bmap *bmap__new(void);
/* Free the map and its keys. NULL is a no-op. */
void bmap__free(struct bmap *m);

/* Number of entries. */
size_t bmap__size(const struct bmap *m);

/*
 * Look @key up. Return a pointer to its value (valid until the next insertion), or NULL.
 */
uint64_t *bmap__find(const struct bmap *m, const void *key, size_t len);

/*
 * Find @key or insert it with value @init. Return a pointer to the value (valid until the
 * next insertion) and set *@inserted (if not NULL) when the key was new; NULL on ENOMEM.
 */
uint64_t *bmap__upsert(struct bmap *m, const void *key, size_t len, uint64_t init, int *inserted);

/*
 * Call @fn(key, len, value, ctx) for every entry, in insertion order; stop early and
 * return its value if it returns non-zero. Return 0 otherwise. @key is valid during the call
 * only, and @fn must not insert into the map.
 */
int bmap__for_each(const struct bmap *m,
		   int (*fn)(const void *key, size_t len, uint64_t *value, void *ctx), void *ctx);

/*
 * For a map whose values are pointers malloc returned (0: none): free each, and set it to 0.
 * The entries stay. NULL is a no-op.
 */
void bmap__free_values(struct bmap *m);

/* Remove every entry (keeps the allocated memory for reuse). */
void bmap__clear(struct bmap *m);

#endif
