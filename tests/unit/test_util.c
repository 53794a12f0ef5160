// SPDX-License-Identifier: MIT
#include <stdint.h>

#include "base/util.h"
#include "test.h"

TEST(thousands_groups_by_three)
{
	char buf[32];

	CHECK_STR(fmt_thousands(buf, sizeof(buf), 0), "0");
	CHECK_STR(fmt_thousands(buf, sizeof(buf), 999), "999");
	CHECK_STR(fmt_thousands(buf, sizeof(buf), 1000), "1,000");
	CHECK_STR(fmt_thousands(buf, sizeof(buf), 123456), "123,456");
	CHECK_STR(fmt_thousands(buf, sizeof(buf), 1234567), "1,234,567");
	CHECK_STR(fmt_thousands(buf, 27, UINT64_MAX), "18,446,744,073,709,551,615");
}

TEST(thousands_cut_short_to_fit)
{
	char buf[8] = "xxxxxxx";

	CHECK_STR(fmt_thousands(buf, 6, 1234567), "1,234");
	CHECK_STR(fmt_thousands(buf, 1, 5), "");
	CHECK_EQ(buf[1], ','); /* nothing written past the NUL */
}

TEST_MAIN()
