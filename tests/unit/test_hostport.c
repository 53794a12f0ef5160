// SPDX-License-Identifier: MIT
/* Unit tests: the ADDR reader shared by --listen, -t and the agent (injector/hostport.h). */
#include <stdbool.h>

#include "test.h"

#include "injector/hostport.h"

static char host[256], err[200];
static unsigned int port;

/* Parse @spec as --listen (a host optional, port 0 allowed) or -t (@target). */
static int parse(const char *spec, bool target)
{
	strcpy(host, "junk");
	port = 12345;
	err[0] = '\0';
	return hostport_parse(spec, target, !target, host, sizeof(host), &port, err, sizeof(err));
}

TEST(accepts_every_documented_form)
{
	CHECK_EQ(parse("9400", false), 0);
	CHECK_STR(host, "");
	CHECK_EQ(port, 9400);
	CHECK_EQ(parse(":9400", false), 0);
	CHECK_STR(host, "");
	CHECK_EQ(parse("0", false), 0);
	CHECK_EQ(port, 0);
	CHECK_EQ(parse("65535", false), 0);
	CHECK_EQ(port, 65535);
	CHECK_EQ(parse("0.0.0.0:1", false), 0);
	CHECK_STR(host, "0.0.0.0");
	CHECK_EQ(port, 1);
	CHECK_EQ(parse("localhost:9400", true), 0);
	CHECK_STR(host, "localhost");
	CHECK_EQ(parse("[::1]:9400", true), 0);
	CHECK_STR(host, "::1");
	CHECK_EQ(port, 9400);
	CHECK_EQ(parse("[fe80::1%eth0]:22", true), 0);
	CHECK_STR(host, "fe80::1%eth0");
}

TEST(ports_out_of_range_never_wrap)
{
	CHECK_EQ(parse("99999", false), -EINVAL); /* getaddrinfo: port 34463 */
	CHECK(strstr(err, "from 0 to 65535") != NULL);
	CHECK_EQ(parse("65536", false), -EINVAL);
	CHECK_EQ(parse("127.0.0.1:4294967297", true), -EINVAL);
	CHECK_EQ(parse("127.0.0.1:0", true), -EINVAL); /* a client needs a real port */
	CHECK(strstr(err, "from 1 to 65535") != NULL);
	CHECK_EQ(parse("127.0.0.1:-1", true), -EINVAL);
	CHECK_EQ(parse("127.0.0.1:+80", true), -EINVAL);
	CHECK_EQ(parse("127.0.0.1:http", true), -EINVAL);
	CHECK_EQ(parse("127.0.0.1:", true), -EINVAL);
	CHECK_EQ(parse("127.0.0.1:80x", true), -EINVAL);
}

TEST(garbage_and_ambiguous_forms_refused)
{
	CHECK_EQ(parse("x:y:z", false), -EINVAL);
	CHECK(strstr(err, "brackets") != NULL);
	CHECK_EQ(parse("::1:9400", true), -EINVAL);
	CHECK_EQ(parse("[::1]", true), -EINVAL);
	CHECK_EQ(parse("[::1]9400", true), -EINVAL);
	CHECK_EQ(parse("[]:9400", true), -EINVAL);
	CHECK_EQ(parse("[127.0.0.1]:9400", true), -EINVAL);
	CHECK_EQ(parse("host]:9400", true), -EINVAL);
	CHECK_EQ(parse("", false), -EINVAL);
	CHECK_EQ(parse("a b:1", true), -EINVAL);
	CHECK_EQ(parse("a\n:1", true), -EINVAL);
	CHECK_EQ(parse(":9400", true), -EINVAL); /* -t needs a host */
	CHECK_EQ(parse("9400", true), -EINVAL);
	{
		char spec[300];

		memset(spec, 'h', 256); /* a host of 256 characters: one more than fits */
		strcpy(spec + 256, ":1");
		CHECK_EQ(parse(spec, true), -EINVAL);
		CHECK(strstr(err, "too long") != NULL);
		spec[255] = ':';
		strcpy(spec + 256, "1");
		CHECK_EQ(parse(spec, true), 0);
	}
}

TEST_MAIN()
