// SPDX-License-Identifier: MIT
/*
 * Open addressing with linear probing over an index array; entries live in a dense array
 * in insertion order (so iteration is stable). A key of up to 8 bytes (a pid, a (pid, tid), an
 * address, an id: most of probing's) is kept in its entry, others in chunked arenas: a lookup
 * of a short key reads the index and the entry only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/bmap.h"
#include "base/util.h"

#define ARENA_CHUNK (256 * 1024)

#define INLINE_KEY 8 /* keys this long or shorter are kept in their entry */

struct bmap_entry {
	uint64_t hash;
	union {
		const unsigned char *key;      /* len > INLINE_KEY: in the arena */
		unsigned char inl[INLINE_KEY]; /* len <= INLINE_KEY */
	};
	size_t len;
	uint64_t value;
};

static inline const unsigned char *entry_key(const struct bmap_entry *ent)
{
	return ent->len <= INLINE_KEY ? ent->inl : ent->key;
}

struct arena_chunk {
	struct arena_chunk *next;
	size_t used, cap;
	unsigned char data[];
};

struct bmap {
	struct bmap_entry *entries; /* dense, insertion order */
	size_t nr, cap;
	/* 0 = empty, else the entry's number + 1 in the low half and the high half of its hash
	 * in the high half: a probe that meets another key's slot mostly skips it without
	 * reading its entry (a cache miss in a large map). */
	uint64_t *index;
	size_t index_cap; /* power of two */
	struct arena_chunk *arena;
};

struct bmap *bmap__new(void)
{
	return calloc(1, sizeof(struct bmap));
}

static void arena_free(struct arena_chunk *c)
{
	while (c) {
		struct arena_chunk *next = c->next;

		free(c);
		c = next;
	}
}

void bmap__free(struct bmap *m)
{
	if (!m)
		return;
	free(m->entries);
	free(m->index);
	arena_free(m->arena);
	free(m);
}

size_t bmap__size(const struct bmap *m)
{
	return m->nr;
}

void bmap__free_values(struct bmap *m)
{
	size_t i;

	for (i = 0; m && i < m->nr; i++) {
		free((void *)(uintptr_t)m->entries[i].value);
		m->entries[i].value = 0;
	}
}

void bmap__clear(struct bmap *m)
{
	struct arena_chunk *c;

	m->nr = 0;
	if (m->index)
		memset(m->index, 0, m->index_cap * sizeof(*m->index));
	/* Keep only the first chunk of the arena. */
	if (m->arena) {
		c = m->arena;
		arena_free(c->next);
		c->next = NULL;
		c->used = 0;
	}
}

static const unsigned char *arena_copy(struct bmap *m, const void *key, size_t len)
{
	struct arena_chunk *c = m->arena;
	unsigned char *p;

	if (!c || c->cap - c->used < len) {
		size_t cap = len > ARENA_CHUNK ? len : ARENA_CHUNK;

		c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->cap = cap;
		c->used = 0;
		c->next = m->arena;
		m->arena = c;
	}
	p = c->data + c->used;
	memcpy(p, key, len);
	c->used += (len + 7) & ~(size_t)7;
	if (c->used > c->cap)
		c->used = c->cap;
	return p;
}

/* The slot of entry number @n whose key hashes to @hash. */
static inline uint64_t index_slot(size_t n, uint64_t hash)
{
	return (hash & 0xffffffff00000000ULL) | (uint32_t)(n + 1);
}

/* The entry number of a slot in use. */
static inline size_t index_entry(uint64_t slot)
{
	return (uint32_t)slot - 1;
}

static size_t slot_of(const struct bmap *m, uint64_t hash, const void *key, size_t len, int *found)
{
	size_t mask = m->index_cap - 1, i = hash & mask;

	for (;; i = (i + 1) & mask) {
		uint64_t e = m->index[i];
		const struct bmap_entry *ent;

		if (!e) {
			*found = 0;
			return i;
		}
		if (e >> 32 != hash >> 32)
			continue;
		ent = &m->entries[index_entry(e)];
		if (ent->hash == hash && ent->len == len && !memcmp(entry_key(ent), key, len)) {
			*found = 1;
			return i;
		}
	}
}

static int grow_index(struct bmap *m)
{
	size_t cap = m->index_cap ? m->index_cap * 2 : 64, i;
	uint64_t *idx = calloc(cap, sizeof(*idx));

	if (!idx)
		return -ENOMEM;
	free(m->index);
	m->index = idx;
	m->index_cap = cap;
	for (i = 0; i < m->nr; i++) {
		size_t j = m->entries[i].hash & (cap - 1);

		while (idx[j])
			j = (j + 1) & (cap - 1);
		idx[j] = index_slot(i, m->entries[i].hash);
	}
	return 0;
}

uint64_t *bmap__find(const struct bmap *m, const void *key, size_t len)
{
	uint64_t hash;
	size_t slot;
	int found;

	if (!m->nr)
		return NULL;
	hash = hash_bytes(HASH_SEED, key, len);
	slot = slot_of(m, hash, key, len, &found);
	return found ? &m->entries[index_entry(m->index[slot])].value : NULL;
}

uint64_t *bmap__upsert(struct bmap *m, const void *key, size_t len, uint64_t init, int *inserted)
{
	uint64_t hash = hash_bytes(HASH_SEED, key, len);
	struct bmap_entry *ent;
	size_t slot;
	int found;

	if (inserted)
		*inserted = 0;
	/* Keep the load factor under 1/2. */
	if ((m->nr + 1) * 2 > m->index_cap && grow_index(m))
		return NULL;
	slot = slot_of(m, hash, key, len, &found);
	if (found)
		return &m->entries[index_entry(m->index[slot])].value;
	if (m->nr == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 32;
		struct bmap_entry *tmp = realloc(m->entries, cap * sizeof(*tmp));

		if (!tmp)
			return NULL;
		m->entries = tmp;
		m->cap = cap;
	}
	ent = &m->entries[m->nr];
	if (len <= INLINE_KEY) {
		memset(ent->inl, 0, sizeof(ent->inl));
		if (len)
			memcpy(ent->inl, key, len);
	} else {
		ent->key = arena_copy(m, key, len);
		if (!ent->key)
			return NULL;
	}
	ent->hash = hash;
	ent->len = len;
	ent->value = init;
	m->index[slot] = index_slot(m->nr++, hash);
	if (inserted)
		*inserted = 1;
	return &ent->value;
}

int bmap__for_each(const struct bmap *m,
		   int (*fn)(const void *key, size_t len, uint64_t *value, void *ctx), void *ctx)
{
	size_t i;
	int ret;

	for (i = 0; i < m->nr; i++) {
		ret = fn(entry_key(&m->entries[i]), m->entries[i].len, &m->entries[i].value, ctx);
		if (ret)
			return ret;
	}
	return 0;
}
