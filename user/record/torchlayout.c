// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "python/pymem.h"
#include "record/torchlayout.h"

static const struct torchlayout known[] = {
	/* Debian 12's libtorch-dev 1.13.0 */
	{"1.13", .pg_rank = 24, .pg_size = 28, .pg_store = 104, .prefix = 32, .ps_store = 64,
	 .ti_numel = TORCHLAYOUT_TENSOR_DEFAULT},
	/* Debian unstable's libtorch-dev 2.14.1 with libgloo-dev 0.0~git20250912 */
	{"2.14", .pg_rank = 16, .pg_size = 20, .pg_store = 144, .prefix = 24, .ps_store = 56,
	 .device_prefix = true, .ti_numel = TORCHLAYOUT_TENSOR_2_14},
};

const struct torchlayout *torchlayout_known(unsigned int i)
{
	return i < sizeof(known) / sizeof(known[0]) ? &known[i] : NULL;
}

const struct torchlayout *torchlayout_by_name(const char *name)
{
	const char *v = strstr(name, ".so.");
	size_t i, n;

	if (!v)
		return NULL;
	v += 4;
	for (i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		n = strlen(known[i].version);
		if (!strncmp(v, known[i].version, n) && (v[n] == '\0' || v[n] == '.'))
			return &known[i];
	}
	return NULL;
}

/* "mov disp(%REG),%eax" at @code, REG being rdi (@rm 7) or rbx (@rm 3): disp32 or disp8. */
static int mov_to_eax(const uint8_t *code, size_t len, unsigned int rm, uint16_t *off)
{
	uint32_t disp;

	if (len >= 6 && code[0] == 0x8b && code[1] == (0x80 | rm)) {
		memcpy(&disp, code + 2, 4);
		if (disp > 0xfff0)
			return -ENOENT;
		*off = disp;
		return 0;
	}
	if (len >= 3 && code[0] == 0x8b && code[1] == (0x40 | rm)) {
		*off = code[2];
		return 0;
	}
	return -ENOENT;
}

int torchlayout_next_tag(const uint8_t *code, size_t len, uint16_t *off)
{
	static const uint8_t endbr64[] = {0xf3, 0x0f, 0x1e, 0xfa};
	/* push %rbx; mov %rdi,%rbx; call rel32 */
	static const uint8_t checked[] = {0x53, 0x48, 0x89, 0xfb, 0xe8};

	if (len >= 4 && !memcmp(code, endbr64, 4)) {
		code += 4;
		len -= 4;
	}
	if (len >= sizeof(checked) + 4 && !memcmp(code, checked, sizeof(checked)))
		return mov_to_eax(code + sizeof(checked) + 4, len - sizeof(checked) - 4, 3, off);
	return mov_to_eax(code, len, 7, off);
}

/* The layout, relative to numel_ (c10/core/TensorImpl.h, c10/core/impl/SizesAndStrides.h):
 * size_t size_ (dimensions), int64 sizes[5] (inline up to 5), int64 strides[5],
 * int64 storage_offset_, int64 numel_, caffe2::TypeMeta data_type_ (uint16). */
#define TL_DIM	   (-96)
#define TL_SIZES   (-88)
#define TL_STRIDES (-48)
#define TL_STORAGE (-8)
#define TL_DTYPE   8
#define TL_INLINE  5
#define TL_DTYPES  18 /* c10::ScalarType values with an item size (below) */

static int64_t i64_at(const uint8_t *hdr, int off)
{
	int64_t v;

	memcpy(&v, hdr + off, sizeof(v));
	return v;
}

enum torchlayout_check torchlayout_tensor_check(const uint8_t *hdr, size_t len, uint16_t numel)
{
	int64_t dim, n, size, product = 1;
	uint16_t dtype;
	int i;

	if (numel < -TL_DIM || (size_t)numel + TL_DTYPE + 2 > len)
		return TL_BAD;
	dim = i64_at(hdr, numel + TL_DIM);
	n = i64_at(hdr, numel);
	memcpy(&dtype, hdr + numel + TL_DTYPE, sizeof(dtype));
	if (n < 0 || i64_at(hdr, numel + TL_STORAGE) < 0 || dtype >= TL_DTYPES || dim < 0)
		return TL_BAD;
	if (dim > TL_INLINE)
		/* Sizes out of line (a pointer in their place): nothing to check them against,
		 * unless the count is absurd (at::Tensor allows 64 dimensions). */
		return dim <= 64 ? TL_UNKNOWN : TL_BAD;
	for (i = 0; i < dim; i++) {
		size = i64_at(hdr, numel + TL_SIZES + 8 * i);
		if (size < 0 || (size && product > INT64_MAX / size))
			return TL_BAD;
		product *= size;
	}
	return product == n ? TL_GOOD : TL_BAD;
}

int torchlayout_tensor_find(const uint8_t *hdr, size_t len, uint16_t *numel)
{
	size_t off;

	for (off = -TL_DIM; off + TL_DTYPE + 2 <= len; off += 8) {
		if (torchlayout_tensor_check(hdr, len, off) != TL_GOOD ||
		    i64_at(hdr, off + TL_DIM) < 1 || i64_at(hdr, off) < 2)
			continue;
		*numel = off;
		return 0;
	}
	return -ENOENT;
}

void torchlayout_tensor_read(const uint8_t *hdr, uint16_t numel, uint64_t *n, uint16_t *dtype)
{
	*n = i64_at(hdr, numel);
	memcpy(dtype, hdr + numel + TL_DTYPE, sizeof(*dtype));
}

unsigned int torchlayout_item_size(unsigned int dtype)
{
	/* c10/core/ScalarType.h: Byte, Char, Short, Int, Long, Half, Float, Double, ComplexHalf,
	 * ComplexFloat, ComplexDouble, Bool, QInt8, QUInt8, QInt32, BFloat16, QUInt4x2,
	 * QUInt2x4. */
	static const unsigned char size[TL_DTYPES] = {1, 1,  2, 4, 8, 2, 4, 8, 4,
						      8, 16, 1, 1, 1, 4, 2, 1, 1};

	return dtype < TL_DTYPES ? size[dtype] : 0;
}

unsigned int torchlayout_nccl_size(unsigned int dtype)
{
	/* nccl.h: Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64,
	 * Bfloat16 (2.10), Float8e4m3, Float8e5m2 (2.19). */
	static const unsigned char size[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

	return dtype < sizeof(size) ? size[dtype] : 0;
}

/* The mangled RTTI name of the dynamic type of the C++ object at @obj into @buf: its vtable's
 * type_info (vptr[-1]) holds the name's address at +8. */
static int type_name(pid_t pid, uint64_t obj, char *buf, size_t size)
{
	uint64_t vptr, ti, name;
	ssize_t n;

	if (pymem_read_u64(pid, obj, &vptr) || vptr < 4096 || pymem_read_u64(pid, vptr - 8, &ti) ||
	    pymem_read_u64(pid, ti + 8, &name))
		return -ENOENT;
	n = pymem_read_partial(pid, name, buf, size - 1);
	if (n <= 0)
		return -ENOENT;
	buf[n] = '\0';
	return 0;
}

static bool is_type(pid_t pid, uint64_t obj, const char *want)
{
	char name[128];

	return obj && !type_name(pid, obj, name, sizeof(name)) && !strcmp(name, want);
}

/*
 * The member of the object at @obj that points to an object of type @want: first at @hint
 * (the known layout), else wherever in the object's first @span bytes one is.
 */
static uint64_t find_member(pid_t pid, uint64_t obj, unsigned int hint, unsigned int span,
			    const char *want)
{
	uint64_t words[64], p = 0;
	unsigned int i;

	if (!pymem_read_u64(pid, obj + hint, &p) && is_type(pid, p, want))
		return p;
	if (!span)
		return 0;
	if (span > sizeof(words))
		span = sizeof(words);
	if (pymem_read(pid, obj, words, span))
		return 0;
	for (i = 0; i < span / 8; i++)
		if (words[i] > 4096 && words[i] % 8 == 0 && is_type(pid, words[i], want))
			return words[i];
	return 0;
}

#define GLOO_STORE   "N4c10d16ProcessGroupGloo9GlooStoreE"
#define PREFIX_STORE "N4c10d11PrefixStoreE"

const struct torchlayout *torchlayout_confirm_group(pid_t pid, uint64_t pg, int32_t *rank,
						    int32_t *size)
{
	const struct torchlayout *tl;
	int32_t rs[2];
	uint64_t gs;
	unsigned int i;

	for (i = 0; (tl = torchlayout_known(i)); i++) {
		if (pymem_read_u64(pid, pg + tl->pg_store, &gs) || !is_type(pid, gs, GLOO_STORE) ||
		    pymem_read(pid, pg + tl->pg_rank, &rs[0], 4) ||
		    pymem_read(pid, pg + tl->pg_size, &rs[1], 4))
			continue;
		if (rs[1] > 0 && rs[1] <= (1 << 24) && rs[0] >= 0 && rs[0] < rs[1]) {
			*rank = rs[0];
			*size = rs[1];
			return tl;
		}
	}
	return NULL;
}

/* The prefix of the PrefixStore at @ps, its std::string at @off: checked as libstdc++ lays one
 * out (the characters' address, the length, then the capacity or the inline characters). */
static int prefix_at(pid_t pid, uint64_t ps, unsigned int off, char *buf, size_t size)
{
	uint64_t str[3];
	size_t n;

	if (pymem_read(pid, ps + off, str, sizeof(str)))
		return -ENOENT;
	n = str[1];
	if (!n || n >= size || n > 256)
		return -ENOENT;
	if (n < 16 ? str[0] != ps + off + 16 : str[2] < n)
		return -ENOENT;
	if (pymem_read(pid, str[0], buf, n))
		return -ENOENT;
	buf[n] = '\0';
	if (n > 1 && buf[n - 1] == '/')
		buf[n - 1] = '\0';
	return 0;
}

int torchlayout_group_name(pid_t pid, uint64_t pg, const struct torchlayout *tl, char *buf,
			   size_t size)
{
	const struct torchlayout *k;
	uint64_t gs, ps;
	unsigned int i;

	/* ProcessGroupGloo::store_ (a unique_ptr or shared_ptr to the GlooStore) at the layout's
	 * offset; GlooStore::store_ (an intrusive_ptr<c10d::Store>) at 8 in both; on 2.x the
	 * device's PrefixStore's store_; then the PrefixStore's prefix_. Without a layout, each
	 * known one is tried. */
	for (i = 0; (k = tl ?: torchlayout_known(i)); i++) {
		gs = find_member(pid, pg, k->pg_store, tl ? 512 : 0, GLOO_STORE);
		ps = gs ? find_member(pid, gs, 8, 64, PREFIX_STORE) : 0;
		if (ps && k->device_prefix)
			ps = find_member(pid, ps, k->ps_store, 0, PREFIX_STORE);
		if (ps && !prefix_at(pid, ps, k->prefix, buf, size))
			return 0;
		if (tl)
			break;
	}
	return -ENOENT;
}
