/* SPDX-License-Identifier: MIT */
/*
 * A minimal unit-test harness, header only: one test binary per module.
 *
 *   #include "test.h"
 *   TEST(parses_empty) { CHECK_EQ(parse(""), -EINVAL); }
 *   TEST_MAIN()
 *
 * Prints "PASS <binary>.<test>" or "FAIL <binary>.<test>: <file:line: what>" per test
 * (tests/run.sh counts these lines) and exits 1 if any test failed.
 */
#ifndef PROBING_TEST_H
#define PROBING_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct test_case {
	const char *name;
	void (*fn)(void);
};

static struct test_case test_cases[512];
static int test_nr;
static int test_failed_now;
static const char *test_prog = "test";

static inline void test_register(const char *name, void (*fn)(void))
{
	if (test_nr < (int)(sizeof(test_cases) / sizeof(test_cases[0])))
		test_cases[test_nr++] = (struct test_case){name, fn};
}

#define TEST(name)                                                     \
	static void name(void);                                        \
	__attribute__((constructor)) static void test_reg_##name(void) \
	{                                                              \
		test_register(#name, name);                            \
	}                                                              \
	static void name(void)

#define TEST_FAIL_(fmt, ...)                                                                      \
	do {                                                                                      \
		if (!test_failed_now)                                                             \
			printf("FAIL %s.%s: %s:%d: " fmt "\n", test_prog, test_current, __FILE__, \
			       __LINE__, ##__VA_ARGS__);                                          \
		test_failed_now = 1;                                                              \
	} while (0)

static const char *test_current = "";

/* Record a failure and go on (the test keeps running; only the first failure is printed). */
#define CHECK(cond)                                     \
	do {                                            \
		if (!(cond))                            \
			TEST_FAIL_("CHECK(%s)", #cond); \
	} while (0)

#define CHECK_EQ(a, b)                                                        \
	do {                                                                  \
		long long a_ = (long long)(a), b_ = (long long)(b);           \
		if (a_ != b_)                                                 \
			TEST_FAIL_("%s == %s: %lld != %lld", #a, #b, a_, b_); \
	} while (0)

#define CHECK_STR(a, b)                                                                      \
	do {                                                                                 \
		const char *a_ = (a), *b_ = (b);                                             \
		if (!a_ || !b_ || strcmp(a_, b_))                                            \
			TEST_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)", \
				   b_ ? b_ : "(null)");                                      \
	} while (0)

/* Stop the current test if @cond is false (use when later checks would crash). */
#define REQUIRE(cond)                                     \
	do {                                              \
		if (!(cond)) {                            \
			TEST_FAIL_("REQUIRE(%s)", #cond); \
			return;                           \
		}                                         \
	} while (0)

#define TEST_MAIN()                                                              \
	int main(int argc, char **argv)                                          \
	{                                                                        \
		int i, failed = 0;                                               \
		const char *slash = strrchr(argv[0], '/');                       \
		test_prog = slash ? slash + 1 : argv[0];                         \
		setvbuf(stdout, NULL, _IOLBF, 0);                                \
		for (i = 0; i < test_nr; i++) {                                  \
			if (argc > 1 && !strstr(test_cases[i].name, argv[1]))    \
				continue;                                        \
			test_current = test_cases[i].name;                       \
			test_failed_now = 0;                                     \
			test_cases[i].fn();                                      \
			if (!test_failed_now)                                    \
				printf("PASS %s.%s\n", test_prog, test_current); \
			failed += test_failed_now;                               \
		}                                                                \
		return failed ? 1 : 0;                                           \
	}

#endif
