// SPDX-License-Identifier: MIT
#include <stdint.h>
#include <stdlib.h>

#include "base/bmap.h"
#include "base/strpool.h"
#include "test.h"

TEST(insert_find_and_grow)
{
	struct bmap *m = bmap__new();
	uint64_t *v;
	int i, inserted;

	REQUIRE(m);
	for (i = 0; i < 10000; i++) {
		v = bmap__upsert(m, &i, sizeof(i), i * 3, &inserted);
		REQUIRE(v);
		CHECK(inserted);
	}
	CHECK_EQ(bmap__size(m), 10000);
	for (i = 0; i < 10000; i++) {
		v = bmap__find(m, &i, sizeof(i));
		REQUIRE(v);
		CHECK_EQ(*v, i * 3);
	}
	i = 10001;
	CHECK(bmap__find(m, &i, sizeof(i)) == NULL);
	/* Upsert of an existing key keeps its value. */
	i = 5;
	v = bmap__upsert(m, &i, sizeof(i), 99, &inserted);
	CHECK(!inserted);
	CHECK_EQ(*v, 15);
	bmap__free(m);
}

TEST(keys_of_different_lengths_are_distinct)
{
	struct bmap *m = bmap__new();
	int inserted;

	bmap__upsert(m, "ab", 2, 1, &inserted);
	bmap__upsert(m, "abc", 3, 2, &inserted);
	bmap__upsert(m, "", 0, 3, &inserted);
	CHECK_EQ(*bmap__find(m, "ab", 2), 1);
	CHECK_EQ(*bmap__find(m, "abc", 3), 2);
	CHECK_EQ(*bmap__find(m, "", 0), 3);
	CHECK(bmap__find(m, "a", 1) == NULL);
	bmap__free(m);
}

static int sum_fn(const void *key, size_t len, uint64_t *value, void *ctx)
{
	*(uint64_t *)ctx = *(uint64_t *)ctx * 10 + *value;
	return 0;
}

TEST(iteration_in_insertion_order_and_clear)
{
	struct bmap *m = bmap__new();
	uint64_t acc = 0;

	bmap__upsert(m, "x", 1, 1, NULL);
	bmap__upsert(m, "y", 1, 2, NULL);
	bmap__upsert(m, "z", 1, 3, NULL);
	bmap__for_each(m, sum_fn, &acc);
	CHECK_EQ(acc, 123);
	bmap__clear(m);
	CHECK_EQ(bmap__size(m), 0);
	CHECK(bmap__find(m, "x", 1) == NULL);
	bmap__upsert(m, "x", 1, 7, NULL);
	CHECK_EQ(*bmap__find(m, "x", 1), 7);
	bmap__free(m);
	bmap__free(NULL);
}

TEST(free_values_frees_each_pointer_and_keeps_the_entries)
{
	struct bmap *m = bmap__new();
	uint64_t *v;
	int i;

	REQUIRE(m);
	for (i = 0; i < 100; i++) {
		/* Every third value is none (0); the others own a block. */
		v = bmap__upsert(m, &i, sizeof(i), i % 3 ? (uintptr_t)malloc(16) : 0, NULL);
		REQUIRE(v);
	}
	bmap__free_values(m);
	CHECK_EQ(bmap__size(m), 100);
	for (i = 0; i < 100; i++) {
		v = bmap__find(m, &i, sizeof(i));
		REQUIRE(v);
		CHECK_EQ(*v, 0);
	}
	bmap__free_values(m); /* again: every value is 0 now */
	bmap__free_values(NULL);
	bmap__free(m);
}

TEST(strpool_interns)
{
	struct strpool *sp = strpool__new();
	char buf[16] = "hello";
	const char *a = strpool__intern(sp, buf), *b;

	strcpy(buf, "world");
	b = strpool__intern(sp, "hello");
	CHECK(a == b);
	CHECK_STR(a, "hello");
	CHECK(strpool__intern(sp, buf) != a);
	CHECK(strpool__intern(sp, NULL) == NULL);
	strpool__free(sp);
}

TEST_MAIN()
