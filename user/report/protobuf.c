// SPDX-License-Identifier: MIT
/* Protocol buffers wire encoding (writing). */
#include <errno.h>

#include "report/protobuf.h"

int pb_varint(struct strbuf *b, uint64_t v)
{
	char buf[10];
	int n = 0;

	do {
		buf[n] = v & 0x7f;
		v >>= 7;
		if (v)
			buf[n] |= 0x80;
		n++;
	} while (v);
	return sb_append(b, buf, n);
}

int pb_tag(struct strbuf *b, uint32_t field, int wiretype)
{
	return pb_varint(b, ((uint64_t)field << 3) | (unsigned)wiretype);
}

int pb_uint(struct strbuf *b, uint32_t field, uint64_t v)
{
	int err;

	if (!v)
		return 0;
	err = pb_tag(b, field, PB_VARINT);
	return err ? err : pb_varint(b, v);
}

int pb_bytes(struct strbuf *b, uint32_t field, const void *data, size_t n)
{
	int err;

	err = pb_tag(b, field, PB_LEN);
	if (!err)
		err = pb_varint(b, n);
	if (!err)
		err = sb_append(b, data, n);
	return err;
}

int pb_packed(struct strbuf *b, uint32_t field, const uint64_t *v, size_t n)
{
	struct strbuf tmp = {0};
	size_t i;
	int err = 0;

	if (!n)
		return 0;
	for (i = 0; i < n && !err; i++)
		err = pb_varint(&tmp, v[i]);
	if (!err)
		err = pb_bytes(b, field, tmp.buf, tmp.len);
	sb_free(&tmp);
	return err;
}
