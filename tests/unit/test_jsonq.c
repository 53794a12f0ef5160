// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonq.h"
#include "test.h"
#include "base/util.h"

TEST(extracts_values)
{
	const char *j = "{\"s\": \"a\\\"b\\n\\u00e9\", \"n\": 42, \"f\": 1.5, \"t\": true, "
			"\"z\": null, \"o\": {\"k\": [1, 2]}}";
	long long v = 0;
	double d = 0;
	char *s;

	s = jq_text(j, "$.s");
	CHECK_STR(s, "a\"b\n\xc3\xa9");
	free(s);
	s = jq_text(j, "$.o.k");
	CHECK_STR(s, "[1,2]");
	free(s);
	s = jq_text(j, "$.n");
	CHECK_STR(s, "42");
	free(s);
	errno = 0;
	CHECK(jq_text(j, "$.z") == NULL && errno == ENOENT);
	CHECK(jq_text(j, "$.missing") == NULL);
	CHECK(jq_text("not json", "$.a") == NULL && errno == EINVAL);
	CHECK(jq_text(NULL, "$.a") == NULL);
	CHECK(jq_int(j, "$.n", &v) == 0 && v == 42);
	CHECK(jq_int(j, "$.s", &v) == -ENOENT);
	CHECK(jq_double(j, "$.f", &d) == 0 && d == 1.5);
	CHECK(jq_bool(j, "$.t"));
	CHECK(!jq_bool(j, "$.z"));
}

struct acc {
	struct strbuf sb;
	int n;
};

static int collect(char **v, int n, void *ctx)
{
	struct acc *a = ctx;
	int i;

	for (i = 0; i < n; i++)
		sb_printf(&a->sb, "%s%s", i ? "," : "", v[i] ? v[i] : "NULL");
	sb_puts(&a->sb, ";");
	a->n++;
	return 0;
}

static int stop_at_two(char **v, int n, void *ctx)
{
	return ++*(int *)ctx == 2 ? 7 : 0;
}

TEST(raw_values_and_types)
{
	const char *doc = "{\"id\":\"a\\\"b\",\"n\":7,\"x\":null,\"o\":{\"k\":[1,2.5]},\"t\":true}";
	char *v;

	v = jq_json(doc, "$.id");
	CHECK_STR(v, "\"a\\\"b\"");
	free(v);
	v = jq_json(doc, "$.n");
	CHECK_STR(v, "7");
	free(v);
	v = jq_json(doc, "$.x");
	CHECK_STR(v, "null");
	free(v);
	v = jq_json(doc, "$.o");
	CHECK_STR(v, "{\"k\":[1,2.5]}");
	free(v);
	CHECK(jq_json(doc, "$.missing") == NULL && errno == ENOENT);
	CHECK(jq_json("{not json", "$") == NULL && errno == EINVAL);
	CHECK_STR(jq_type(doc, "$.id"), "text");
	CHECK_STR(jq_type(doc, "$.n"), "integer");
	CHECK_STR(jq_type(doc, "$.o.k[1]"), "real");
	CHECK_STR(jq_type(doc, "$.o"), "object");
	CHECK_STR(jq_type(doc, "$.x"), "null");
	CHECK_STR(jq_type(doc, "$.t"), "true");
	CHECK_STR(jq_type("[1]", "$"), "array");
	CHECK(jq_type(doc, "$.missing") == NULL);
	CHECK(jq_type("{", "$") == NULL);
	{
		static const char *const keys[] = {"id", "n", "x", "o", NULL};
		char *k = jq_unknown_key(doc, keys);

		CHECK_STR(k, "t");
		free(k);
		CHECK(jq_unknown_key("{\"id\":1}", keys) == NULL);
		CHECK(jq_unknown_key("[1]", keys) == NULL);
	}
}

TEST(iterates_arrays)
{
	const char *j =
		"{\"rows\": [[1, \"x\", null], [2, \"y\", 3.5]], \"names\": [\"a\", \"b\"], "
		"\"objs\": [{\"name\": \"p\", \"v\": 1}, {\"name\": \"q\"}]}";
	static const char *const cols[] = {"$[0]", "$[1]", "$[2]"};
	static const char *const one[] = {"$"};
	static const char *const named[] = {"$.name", "$.v"};
	struct acc a = {{0}, 0};
	int k = 0;

	CHECK_EQ(jq_each(j, "$.rows", cols, 3, collect, &a), 0);
	CHECK_STR(sb_str(&a.sb), "1,x,NULL;2,y,3.5;");
	sb_reset(&a.sb);
	CHECK_EQ(jq_each(j, "$.names", one, 1, collect, &a), 0);
	CHECK_STR(sb_str(&a.sb), "a;b;");
	sb_reset(&a.sb);
	CHECK_EQ(jq_each(j, "$.objs", named, 2, collect, &a), 0);
	CHECK_STR(sb_str(&a.sb), "p,1;q,NULL;");
	CHECK_EQ(jq_each(j, "$.rows", cols, 3, stop_at_two, &k), 7);
	CHECK_EQ(jq_each("{broken", "$", cols, 1, collect, &a), -EINVAL);
	sb_free(&a.sb);
}

TEST(quotes_round_trip)
{
	const char *nasty = "q\"b\\s\n\t\x01 \xe2\x82\xac end";
	struct strbuf sb = {0};
	char *back;

	CHECK_EQ(sb_puts(&sb, "{\"k\": "), 0);
	CHECK_EQ(jq_quote(&sb, nasty), 0);
	CHECK_EQ(sb_puts(&sb, "}"), 0);
	back = jq_text(sb_str(&sb), "$.k");
	CHECK_STR(back, nasty);
	free(back);
	sb_free(&sb);
}

TEST_MAIN()
