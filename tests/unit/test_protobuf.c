// SPDX-License-Identifier: MIT
/* Unit tests: protocol buffers wire encoding (the examples of protobuf.dev's encoding page). */
#include "test.h"

#include "report/protobuf.h"

/* The bytes of @sb as lowercase hex, space separated. */
static const char *hex(const struct strbuf *sb)
{
	static char out[512];
	size_t i, o = 0;

	out[0] = '\0';
	for (i = 0; i < sb->len && o + 4 < sizeof(out); i++)
		o += snprintf(out + o, sizeof(out) - o, i ? " %02x" : "%02x",
			      (unsigned char)sb->buf[i]);
	return out;
}

static const char *varint(uint64_t v)
{
	static struct strbuf sb;

	sb_reset(&sb);
	CHECK_EQ(pb_varint(&sb, v), 0);
	return hex(&sb);
}

TEST(varints)
{
	CHECK_STR(varint(0), "00");
	CHECK_STR(varint(1), "01");
	CHECK_STR(varint(127), "7f");
	CHECK_STR(varint(128), "80 01");
	CHECK_STR(varint(150), "96 01");
	CHECK_STR(varint(300), "ac 02");
	CHECK_STR(varint(16383), "ff 7f");
	CHECK_STR(varint(16384), "80 80 01");
	CHECK_STR(varint(UINT32_MAX), "ff ff ff ff 0f");
	CHECK_STR(varint(UINT64_MAX), "ff ff ff ff ff ff ff ff ff 01");
	/* int64 -1 is its two's complement: ten bytes. */
	CHECK_STR(varint((uint64_t)(int64_t)-1), "ff ff ff ff ff ff ff ff ff 01");
}

TEST(fields)
{
	struct strbuf sb = {0};
	uint64_t packed[] = {3, 270, 86942};

	/* Field 1 = 150: the encoding guide's first example. */
	CHECK_EQ(pb_uint(&sb, 1, 150), 0);
	CHECK_STR(hex(&sb), "08 96 01");
	/* Zero is the default and is left out. */
	sb_reset(&sb);
	CHECK_EQ(pb_uint(&sb, 1, 0), 0);
	CHECK_EQ(sb.len, 0);
	/* Field 2 = "testing". */
	sb_reset(&sb);
	CHECK_EQ(pb_bytes(&sb, 2, "testing", 7), 0);
	CHECK_STR(hex(&sb), "12 07 74 65 73 74 69 6e 67");
	/* An empty string is still written (the string table's entry 0). */
	sb_reset(&sb);
	CHECK_EQ(pb_bytes(&sb, 6, "", 0), 0);
	CHECK_STR(hex(&sb), "32 00");
	/* Packed repeated field 4 = [3, 270, 86942]. */
	sb_reset(&sb);
	CHECK_EQ(pb_packed(&sb, 4, packed, 3), 0);
	CHECK_STR(hex(&sb), "22 06 03 8e 02 9e a7 05");
	sb_reset(&sb);
	CHECK_EQ(pb_packed(&sb, 4, packed, 0), 0);
	CHECK_EQ(sb.len, 0);
	/* A large field number: the tag itself is a varint. */
	sb_reset(&sb);
	CHECK_EQ(pb_tag(&sb, 16, PB_LEN), 0);
	CHECK_STR(hex(&sb), "82 01");
	sb_free(&sb);
}

TEST_MAIN()
