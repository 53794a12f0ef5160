// SPDX-License-Identifier: MIT
#include <errno.h>
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

TEST(durations_with_their_units)
{
	double v = 0;

	CHECK_EQ(parse_duration("90", 1, 1e9, &v), 0);
	CHECK(v == 90);
	CHECK_EQ(parse_duration("90s", 1, 1e9, &v), 0);
	CHECK(v == 90);
	CHECK_EQ(parse_duration("5m", 1, 1e9, &v), 0);
	CHECK(v == 300);
	CHECK_EQ(parse_duration("1.5h", 1, 1e9, &v), 0);
	CHECK(v == 5400);
	CHECK_EQ(parse_duration("2d", 1, 1e9, &v), 0);
	CHECK(v == 172800);
	/* Not durations, or outside the range (said in seconds): nothing written. */
	v = -1;
	CHECK_EQ(parse_duration("", 1, 1e9, &v), -EINVAL);
	CHECK_EQ(parse_duration("soon", 1, 1e9, &v), -EINVAL);
	CHECK_EQ(parse_duration("5x", 1, 1e9, &v), -EINVAL);
	CHECK_EQ(parse_duration("m", 1, 1e9, &v), -EINVAL);
	CHECK_EQ(parse_duration("0.5s", 1, 1e9, &v), -EINVAL);
	CHECK_EQ(parse_duration("2h", 1, 3600, &v), -EINVAL);
	CHECK_EQ(parse_duration("-5m", 1, 1e9, &v), -EINVAL);
	CHECK(v == -1);
}

TEST_MAIN()
