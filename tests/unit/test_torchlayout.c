// SPDX-License-Identifier: MIT
/* torchlayout: nextTag's counter offset from machine code, the TensorImpl layout check and
 * search, item sizes. The code bytes are those of ProcessGroupGloo::nextTag in Debian's
 * libtorch_cpu.so.1.13.0 (build-id feaefbc5...); the tensor headers are laid out as the 1.13
 * headers (libtorch-dev) put a c10::TensorImpl. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "record/torchlayout.h"
#include "test.h"

TEST(next_tag_offset_from_its_code)
{
	/* mov 0xac(%rdi),%eax; lea 0x1(%rax),%edx; mov %edx,0xac(%rdi); ret */
	static const uint8_t debian[] = {0x8b, 0x87, 0xac, 0x00, 0x00, 0x00, 0x8d, 0x50,
					 0x01, 0x89, 0x97, 0xac, 0x00, 0x00, 0x00, 0xc3};
	static const uint8_t cet[] = {0xf3, 0x0f, 0x1e, 0xfa, 0x8b, 0x47, 0x48, 0x8d, 0x50, 0x01};
	static const uint8_t other[] = {0x55, 0x48, 0x89, 0xe5, 0x8b, 0x87, 0xac, 0x00};
	uint16_t off = 0;

	CHECK_EQ(torchlayout_next_tag(debian, sizeof(debian), &off), 0);
	CHECK_EQ(off, 172);
	CHECK_EQ(torchlayout_next_tag(cet, sizeof(cet), &off), 0); /* endbr64, disp8 */
	CHECK_EQ(off, 0x48);
	CHECK_EQ(torchlayout_next_tag(other, sizeof(other), &off), -ENOENT);
	CHECK_EQ(torchlayout_next_tag(debian, 3, &off), -ENOENT); /* cut short */
}

TEST(next_tag_offset_after_the_group_check)
{
	/* Debian's libtorch_cpu.so.2.14.1: endbr64; push %rbx; mov %rdi,%rbx;
	 * call checkInitialized; mov 0xf4(%rbx),%eax; lea 0x1(%rax),%edx; mov %edx,0xf4(%rbx) */
	static const uint8_t sid[] = {0xf3, 0x0f, 0x1e, 0xfa, 0x53, 0x48, 0x89, 0xfb,
				      0xe8, 0x13, 0x3e, 0xc0, 0xf9, 0x8b, 0x83, 0xf4,
				      0x00, 0x00, 0x00, 0x8d, 0x50, 0x01, 0x89, 0x93};
	/* the same with a disp8, and one whose load is from %rdi (not the register saved) */
	static const uint8_t short8[] = {0x53, 0x48, 0x89, 0xfb, 0xe8, 0,
					 0,    0,    0,	   0x8b, 0x43, 0x30};
	static const uint8_t rdi[] = {0x53, 0x48, 0x89, 0xfb, 0xe8, 0, 0, 0, 0, 0x8b, 0x47, 0x30};
	uint16_t off = 0;

	CHECK_EQ(torchlayout_next_tag(sid, sizeof(sid), &off), 0);
	CHECK_EQ(off, 244); /* collectiveCounter_, offsetof from the 2.14 headers */
	CHECK_EQ(torchlayout_next_tag(short8, sizeof(short8), &off), 0);
	CHECK_EQ(off, 0x30);
	CHECK_EQ(torchlayout_next_tag(rdi, sizeof(rdi), &off), -ENOENT);
	CHECK_EQ(torchlayout_next_tag(sid, 14, &off), -ENOENT); /* cut short */
}

TEST(layout_by_the_file_name)
{
	const struct torchlayout *tl;

	tl = torchlayout_by_name("libtorch_cpu.so.2.14.1");
	CHECK(tl && !strcmp(tl->version, "2.14") && tl->pg_rank == 16 && tl->ti_numel == 152);
	tl = torchlayout_by_name("libtorch_cpu.so.1.13");
	CHECK(tl && !strcmp(tl->version, "1.13") && tl->pg_rank == 24 && tl->ti_numel == 168);
	CHECK(!torchlayout_by_name("libtorch_cpu.so"));		/* a wheel's: no version */
	CHECK(!torchlayout_by_name("libtorch_cpu.so.2.140.0")); /* not 2.14 */
	CHECK(!torchlayout_by_name("libtorch_cpu.so.2.5.1"));
	CHECK(torchlayout_known(0) && torchlayout_known(1) && !torchlayout_known(2));
}

/* A TensorImpl header with numel_ at @numel: @dim sizes, contiguous strides, a dtype. */
static void make_tensor(uint8_t *hdr, size_t len, unsigned int numel, int64_t dim,
			const int64_t *sizes, uint16_t dtype)
{
	int64_t n = 1, stride = 1, zero = 0;
	int i;

	memset(hdr, 0xab, len);
	memcpy(hdr + numel - 96, &dim, 8);
	for (i = 0; i < 5; i++) {
		memcpy(hdr + numel - 88 + 8 * i, i < dim ? &sizes[i] : &zero, 8);
		if (i < dim)
			n *= sizes[i];
	}
	for (i = dim - 1; i >= 0; i--) {
		memcpy(hdr + numel - 48 + 8 * i, &stride, 8);
		stride *= sizes[i];
	}
	memcpy(hdr + numel - 8, &zero, 8); /* storage_offset_ */
	memcpy(hdr + numel, &n, 8);
	memcpy(hdr + numel + 8, &dtype, 2);
}

TEST(tensor_layout_checked_and_found)
{
	static const int64_t grads[] = {5560}, mat[] = {50, 100}, six[] = {1, 2, 3, 4, 5, 6};
	uint8_t hdr[192];
	uint64_t n = 0;
	uint16_t dtype = 0, off = 0;

	/* torch 1.13: numel_ at 168, a float32 gradient bucket of 5,560 elements. */
	make_tensor(hdr, sizeof(hdr), TORCHLAYOUT_TENSOR_DEFAULT, 1, grads, 6);
	CHECK_EQ(torchlayout_tensor_check(hdr, sizeof(hdr), TORCHLAYOUT_TENSOR_DEFAULT), TL_GOOD);
	torchlayout_tensor_read(hdr, TORCHLAYOUT_TENSOR_DEFAULT, &n, &dtype);
	CHECK_EQ(n, 5560);
	CHECK_EQ(dtype, 6);
	CHECK_EQ(n * torchlayout_item_size(dtype), 22240);
	/* The wrong place is told apart from the right one. */
	CHECK_EQ(torchlayout_tensor_check(hdr, sizeof(hdr), 160), TL_BAD);
	CHECK_EQ(torchlayout_tensor_check(hdr, sizeof(hdr), 176), TL_BAD);
	/* numel_ that does not match the sizes. */
	memcpy(hdr + 168, &(int64_t){5561}, 8);
	CHECK_EQ(torchlayout_tensor_check(hdr, sizeof(hdr), 168), TL_BAD);

	/* Another build whose fields moved by 16 bytes: found where they are. */
	make_tensor(hdr, sizeof(hdr), 152, 2, mat, 7);
	CHECK_EQ(torchlayout_tensor_check(hdr, sizeof(hdr), 168), TL_BAD);
	CHECK_EQ(torchlayout_tensor_find(hdr, sizeof(hdr), &off), 0);
	CHECK_EQ(off, 152);

	/* More than 5 dimensions: sizes out of line, nothing to check against. */
	make_tensor(hdr, sizeof(hdr), 168, 5, six, 6);
	memcpy(hdr + 168 - 96, &(int64_t){6}, 8);
	CHECK_EQ(torchlayout_tensor_check(hdr, sizeof(hdr), 168), TL_UNKNOWN);
	/* A header too short for the layout. */
	CHECK_EQ(torchlayout_tensor_check(hdr, 170, 168), TL_BAD);
}

TEST(item_sizes)
{
	CHECK_EQ(torchlayout_item_size(4), 8);	 /* Long */
	CHECK_EQ(torchlayout_item_size(6), 4);	 /* Float */
	CHECK_EQ(torchlayout_item_size(10), 16); /* ComplexDouble */
	CHECK_EQ(torchlayout_item_size(15), 2);	 /* BFloat16 */
	CHECK_EQ(torchlayout_item_size(18), 0);
	CHECK_EQ(torchlayout_nccl_size(7), 4); /* ncclFloat32 */
	CHECK_EQ(torchlayout_nccl_size(4), 8); /* ncclInt64 */
	CHECK_EQ(torchlayout_nccl_size(9), 2); /* ncclBfloat16 */
	CHECK_EQ(torchlayout_nccl_size(12), 0);
}

TEST_MAIN()
