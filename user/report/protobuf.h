/* SPDX-License-Identifier: MIT */
/*
 * protobuf: the protocol buffers wire format, the writing half, as much as profile.proto
 * needs (https://protobuf.dev/programming-guides/encoding/): varints, tags, length-delimited
 * fields and packed repeated varints. A nested message is encoded into its own buffer first
 * and then added with pb_bytes (its length has to come before it).
 *
 * Every function appends to @b and returns 0 or -ENOMEM.
 */
#ifndef PROBING_PROTOBUF_H
#define PROBING_PROTOBUF_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

#define PB_VARINT 0 /* wire types */
#define PB_LEN	  2

/* @v as a base-128 varint: 7 bits a byte, least significant first, high bit = more. */
int pb_varint(struct strbuf *b, uint64_t v);

/* A field's key: (field number << 3) | wire type. */
int pb_tag(struct strbuf *b, uint32_t field, int wiretype);

/*
 * A varint field (uint64, int64, bool). int64 values go as their two's complement (negative
 * numbers take ten bytes), as protobuf's int64 does. Zero is left out: it is the default.
 */
int pb_uint(struct strbuf *b, uint32_t field, uint64_t v);

/* A length-delimited field (string, bytes, nested message), written even when empty. */
int pb_bytes(struct strbuf *b, uint32_t field, const void *data, size_t n);

/* A packed repeated varint field (nothing when @n is 0). */
int pb_packed(struct strbuf *b, uint32_t field, const uint64_t *v, size_t n);

#endif
