// SPDX-License-Identifier: MIT
/* pyoffsets: table lookup and the _Py_DebugOffsets reader (synthetic buffers; the tables
 * themselves are verified against real interpreters by test_python_offsets). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "pyoffsets/pyoffsets.h"
#include "test.h"

/* The supported range (PY_VERSION_MIN .. PY_VERSION_MAX) is exactly what the tables cover. */
TEST(one_table_per_supported_version)
{
	const struct py_offsets *const *all;
	char text[32];
	size_t nr, i;

	all = py_offsets_all(&nr);
	CHECK_EQ(nr, PY_VERSION_MAX - PY_VERSION_MIN + 1);
	for (i = 0; i < nr; i++) {
		CHECK_EQ(all[i]->version, PY_VERSION_MIN + i);
		CHECK(py_offsets_for(PY_VERSION_MIN + i) == all[i]);
	}
	errno = 0;
	CHECK(py_offsets_for(PY_VERSION_MIN - 1) == NULL);
	CHECK_EQ(errno, ENOTSUP);
	CHECK(py_offsets_for(PY_VERSION_MAX + 1) == NULL);
	CHECK_EQ(PY_VER(3, 11), 0x030b);
	snprintf(text, sizeof(text), "%u.%u-%u.%u", PY_VER_MAJOR(PY_VERSION_MIN),
		 PY_VER_MINOR(PY_VERSION_MIN), PY_VER_MAJOR(PY_VERSION_MAX),
		 PY_VER_MINOR(PY_VERSION_MAX));
	CHECK(!strcmp(PY_VERSIONS, text));
}

TEST(fields_present_where_cpython_has_them)
{
	const struct py_offsets *o8 = py_offsets_for(PY_VER(3, 8)),
				*o11 = py_offsets_for(PY_VER(3, 11));
	const struct py_offsets *o12 = py_offsets_for(PY_VER(3, 12)),
				*o13 = py_offsets_for(PY_VER(3, 13));

	REQUIRE(o8 && o11 && o12 && o13);
	CHECK(o8->ts_frame != PYO_NONE && o8->ts_cframe == PYO_NONE);
	CHECK(o8->co_lnotab != PYO_NONE && o8->co_linetable == PYO_NONE);
	CHECK(o8->ts_native_thread_id == PYO_NONE && o8->co_qualname == PYO_NONE);
	CHECK(o11->ts_cframe != PYO_NONE && o11->if_is_entry != PYO_NONE);
	CHECK(o12->if_is_entry == PYO_NONE && o12->if_owner != PYO_NONE);
	CHECK(o12->long_lv_tag != PYO_NONE && o11->long_lv_tag == PYO_NONE);
	CHECK(o13->ts_current_frame != PYO_NONE && o13->ts_cframe == PYO_NONE);
	CHECK(o13->dbg_size != PYO_NONE && o12->dbg_size == PYO_NONE);
	/* Frame locals: f_localsplus and names tuples up to 3.10, localsplus and kinds since. */
	CHECK(o8->f_localsplus != PYO_NONE && o8->co_varnames != PYO_NONE);
	CHECK(o8->if_localsplus == PYO_NONE && o8->co_localspluskinds == PYO_NONE);
	CHECK(o11->if_localsplus != PYO_NONE && o11->co_localsplusnames != PYO_NONE);
	CHECK(o11->f_localsplus == PYO_NONE && o11->co_varnames == PYO_NONE);
	CHECK(o13->co_nlocalsplus != PYO_NONE && o13->if_locals != PYO_NONE);
	CHECK(o8->cell_ref != PYO_NONE && o13->set_used != PYO_NONE);
	/* PyObject header: ob_type right after ob_refcnt in every default build. */
	CHECK_EQ(o8->ob_type, 8);
	CHECK_EQ(o13->ob_type, 8);
}

/* A _Py_DebugOffsets image that says exactly what table @t says, every struct 64 KiB. */
static void make_debug(const struct py_offsets *t, uint8_t *buf, size_t len, uint64_t version)
{
	uint64_t size = 0x10000;
	unsigned int i;

	memset(buf, 0, len);
	memcpy(buf, PY_DEBUG_COOKIE, 8);
	memcpy(buf + t->dbg_version, &version, 8);
	for (i = 0; i < PY_DBG_NR; i++) {
		uint32_t v;
		uint64_t v64;
		size_t at;

		/* the table value of field i, by name through the X-macro order */
#define GET_(name, path, width)                   \
	if (!strcmp(py_dbg_field_name(i), #name)) \
		v = t->name;
		v = 0;
		PY_DEBUG_FIELDS(GET_)
#undef GET_
		v64 = v;
		at = t->dbg[i];
		memcpy(buf + at, &v64, 8);
		memcpy(buf + t->dbg_bound[i], &size, 8);
	}
}

/* Set the value of debug field @name in the image @buf laid out as @t. */
static void set_debug(const struct py_offsets *t, uint8_t *buf, const char *name, bool bound,
		      uint64_t v)
{
	unsigned int i;

	for (i = 0; i < PY_DBG_NR; i++)
		if (!strcmp(py_dbg_field_name(i), name))
			memcpy(buf + (bound ? t->dbg_bound[i] : t->dbg[i]), &v, 8);
}

TEST(debug_offsets_override_the_table)
{
	const struct py_offsets *t = py_offsets_for(PY_VER(3, 13));
	struct py_offsets out;
	uint8_t buf[4096];
	uint64_t hex = 0, v = 4242;
	unsigned int i;

	REQUIRE(t && t->dbg_size <= sizeof(buf));
	make_debug(t, buf, sizeof(buf), 0x030d00f0);
	CHECK_EQ(py_offsets_apply_debug(t, buf, t->dbg_size, PY_VER(3, 13), &out, &hex), 0);
	CHECK_EQ(hex, 0x030d00f0);
	CHECK(!memcmp(&out, t, sizeof(out)));
	for (i = 0; i < PY_DBG_NR; i++)
		if (!strcmp(py_dbg_field_name(i), "ts_current_frame"))
			memcpy(buf + t->dbg[i], &v, 8);
	CHECK_EQ(py_offsets_apply_debug(t, buf, t->dbg_size, PY_VER(3, 13), &out, NULL), 0);
	CHECK_EQ(out.ts_current_frame, 4242);
	CHECK_EQ(out.ts_thread_id, t->ts_thread_id);
}

/* 3.14 and 3.15 lay _Py_DebugOffsets out differently (3.15 added thread-state fields): each
 * version's block is read by its own layout. */
TEST(debug_offsets_of_314_and_315)
{
	const struct py_offsets *t14 = py_offsets_for(PY_VER(3, 14)),
				*t15 = py_offsets_for(PY_VER(3, 15));
	struct py_offsets out;
	uint8_t buf[4096];

	REQUIRE(t14 && t15 && t15->dbg_size <= sizeof(buf));
	CHECK(t14->dbg_size != t15->dbg_size);
	make_debug(t14, buf, sizeof(buf), 0x030e0af0);
	CHECK_EQ(py_offsets_apply_debug(t14, buf, t14->dbg_size, PY_VER(3, 14), &out, NULL), 0);
	CHECK(!memcmp(&out, t14, sizeof(out)));
	make_debug(t15, buf, sizeof(buf), 0x030f02f0);
	CHECK_EQ(py_offsets_apply_debug(t15, buf, t15->dbg_size, PY_VER(3, 15), &out, NULL), 0);
	CHECK(!memcmp(&out, t15, sizeof(out)));
	/* A 3.15 process is not a 3.14 one. */
	CHECK_EQ(py_offsets_apply_debug(t15, buf, t15->dbg_size, PY_VER(3, 14), &out, NULL),
		 -ERANGE);
	/* 3.15 has no TSS key for thread states; 3.14 does. */
	CHECK(t14->rt_tss != PYO_NONE && t15->rt_tss == PYO_NONE);
	/* 3.14 caches a tuple's hash in the object: ob_item moved. */
	CHECK_EQ(t14->tuple_item, 32);
}

/* The block is target memory: free-threaded builds and offsets outside their struct are
 * refused, whatever the version. */
TEST(debug_offsets_untrusted)
{
	static const unsigned int minors[] = {13, 14, 15};
	struct py_offsets out;
	uint8_t buf[4096];
	unsigned int k;

	for (k = 0; k < sizeof(minors) / sizeof(minors[0]); k++) {
		const struct py_offsets *t = py_offsets_for(PY_VER(3, minors[k]));
		uint64_t hex = (uint64_t)PY_VER(3, minors[k]) << 16 | 0xf0, one = 1;

		REQUIRE(t && t->dbg_size <= sizeof(buf));
		make_debug(t, buf, sizeof(buf), hex);
		memcpy(buf + t->dbg_free_threaded, &one, 8);
		CHECK_EQ(py_offsets_apply_debug(t, buf, t->dbg_size, t->version, &out, NULL),
			 -ENOTSUP);
		CHECK(!memcmp(&out, t, sizeof(out)));
		/* An offset past its struct's end. */
		make_debug(t, buf, sizeof(buf), hex);
		set_debug(t, buf, "ts_current_frame", false, 0x10000);
		CHECK_EQ(py_offsets_apply_debug(t, buf, t->dbg_size, t->version, &out, NULL),
			 -EBADMSG);
		/* A pointer field whose last bytes are past the end. */
		make_debug(t, buf, sizeof(buf), hex);
		set_debug(t, buf, "if_previous", false, 0x10000 - 4);
		CHECK_EQ(py_offsets_apply_debug(t, buf, t->dbg_size, t->version, &out, NULL),
			 -EBADMSG);
		/* A struct of absurd size makes any offset "fit": refused too. */
		make_debug(t, buf, sizeof(buf), hex);
		set_debug(t, buf, "ts_next", true, (uint64_t)1 << 40);
		CHECK_EQ(py_offsets_apply_debug(t, buf, t->dbg_size, t->version, &out, NULL),
			 -EBADMSG);
		/* At the last byte that fits: accepted. */
		make_debug(t, buf, sizeof(buf), hex);
		set_debug(t, buf, "if_owner", false, 0x10000 - 1);
		CHECK_EQ(py_offsets_apply_debug(t, buf, t->dbg_size, t->version, &out, NULL), 0);
		CHECK_EQ(out.if_owner, 0x10000 - 1);
	}
}

TEST(debug_offsets_rejected)
{
	const struct py_offsets *t = py_offsets_for(PY_VER(3, 13)),
				*t12 = py_offsets_for(PY_VER(3, 12));
	struct py_offsets out;
	uint8_t buf[4096];
	uint64_t one = 1;

	REQUIRE(t && t12);
	make_debug(t, buf, sizeof(buf), 0x030e00a1); /* 3.14 */
	CHECK_EQ(py_offsets_apply_debug(t, buf, t->dbg_size, PY_VER(3, 13), &out, NULL), -ERANGE);
	CHECK(!memcmp(&out, t, sizeof(out)));
	make_debug(t, buf, sizeof(buf), 0x030d00f0);
	CHECK_EQ(py_offsets_apply_debug(t, buf, t->dbg_size - 1, PY_VER(3, 13), &out, NULL),
		 -EINVAL);
	memcpy(buf + t->dbg_free_threaded, &one, 8);
	CHECK_EQ(py_offsets_apply_debug(t, buf, t->dbg_size, PY_VER(3, 13), &out, NULL), -ENOTSUP);
	make_debug(t, buf, sizeof(buf), 0x030d00f0);
	buf[0] = 'X';
	CHECK_EQ(py_offsets_apply_debug(t, buf, t->dbg_size, PY_VER(3, 13), &out, NULL), -EINVAL);
	/* No _Py_DebugOffsets before 3.13. */
	CHECK_EQ(py_offsets_apply_debug(t12, buf, sizeof(buf), PY_VER(3, 12), &out, NULL), -EINVAL);
}

TEST_MAIN()
