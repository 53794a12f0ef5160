// SPDX-License-Identifier: MIT
/* pymem: reading a process's memory, on ourselves: exact reads, partial reads stopping at an
 * unmapped page, faults and vanished processes. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "python/pymem.h"
#include "test.h"

TEST(reads_own_memory)
{
	static const char text[] = "hello, process_vm_readv";
	char buf[sizeof(text)];
	uint64_t v = 0x1122334455667788ull, got = 0;
	uint32_t g32 = 0;

	CHECK_EQ(pymem_read(getpid(), (uintptr_t)text, buf, sizeof(buf)), 0);
	CHECK_STR(buf, text);
	CHECK_EQ(pymem_read_u64(getpid(), (uintptr_t)&v, &got), 0);
	CHECK_EQ(got, v);
	CHECK_EQ(pymem_read_u32(getpid(), (uintptr_t)&v, &g32), 0);
	CHECK_EQ(g32, 0x55667788u);
	CHECK_EQ(pymem_read(getpid(), (uintptr_t)text, buf, 0), 0);
}

TEST(partial_read_stops_at_unmapped_page)
{
	long pg = sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char buf[64];

	REQUIRE(p != MAP_FAILED);
	memset(p, 'a', pg);
	REQUIRE(munmap(p + pg, pg) == 0);
	/* 16 bytes before the hole, 48 into it */
	CHECK_EQ(pymem_read_partial(getpid(), (uintptr_t)(p + pg - 16), buf, sizeof(buf)), 16);
	CHECK_EQ(buf[15], 'a');
	CHECK_EQ(pymem_read(getpid(), (uintptr_t)(p + pg - 16), buf, sizeof(buf)), -EFAULT);
	CHECK_EQ(pymem_read_partial(getpid(), (uintptr_t)(p + pg), buf, sizeof(buf)), 0);
	CHECK_EQ(pymem_read(getpid(), 0, buf, 8), -EFAULT);
	munmap(p, pg);
}

TEST(gone_process_is_esrch)
{
	char buf[8];

	/* pid_max is at most 4194304: this pid cannot exist. */
	CHECK_EQ(pymem_read(0x7ffffff0, 0x1000, buf, sizeof(buf)), -ESRCH);
}

TEST_MAIN()
