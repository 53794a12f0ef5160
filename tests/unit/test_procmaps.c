// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "base/procmaps.h"
#include "test.h"

static const char maps[] =
	"55d0c8a00000-55d0c8a02000 r--p 00000000 fe:01 1234   /usr/bin/prog\n"
	"55d0c8a02000-55d0c8a05000 r-xp 00002000 fe:01 1234   /usr/bin/prog\n"
	"7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n"
	"7f1000000000-7f1000001000 r-xp 00001000 08:02 99 /tmp/lib with space.so (deleted)\n"
	"7ffd1c9f0000-7ffd1c9f2000 r-xp 00000000 00:00 0                          [vdso]\n";

TEST(parses_fields)
{
	struct procmaps pm;
	const struct procmap *m;

	REQUIRE(procmaps__parse(maps, &pm) == 0);
	CHECK_EQ(pm.nr, 5);
	m = &pm.maps[1];
	CHECK_EQ(m->start, 0x55d0c8a02000ULL);
	CHECK_EQ(m->end, 0x55d0c8a05000ULL);
	CHECK_EQ(m->offset, 0x2000);
	CHECK(m->r && !m->w && m->x && m->p);
	CHECK_EQ(m->inode, 1234);
	CHECK_EQ(m->dev_major, 0xfe);
	CHECK_STR(m->path, "/usr/bin/prog");
	CHECK_STR(pm.maps[2].path, "");
	CHECK_STR(pm.maps[3].path, "/tmp/lib with space.so");
	CHECK(pm.maps[3].deleted);
	CHECK_STR(pm.maps[4].path, "[vdso]");
	procmaps__release(&pm);
}

TEST(finds_addresses)
{
	struct procmaps pm;

	REQUIRE(procmaps__parse(maps, &pm) == 0);
	CHECK(procmaps__find(&pm, 0x55d0c8a02000ULL) == &pm.maps[1]);
	CHECK(procmaps__find(&pm, 0x55d0c8a04fffULL) == &pm.maps[1]);
	CHECK(procmaps__find(&pm, 0x55d0c8a05000ULL) == NULL);
	CHECK(procmaps__find(&pm, 0x1000) == NULL);
	CHECK(procmaps__find(&pm, 0x7ffd1c9f0001ULL) == &pm.maps[4]);
	procmaps__release(&pm);
}

TEST(rejects_garbage)
{
	struct procmaps pm;

	CHECK(procmaps__parse("not a maps line\n", &pm) < 0);
	CHECK(procmaps__parse("1000-0 r-xp 0 00:00 0\n", &pm) < 0);
}

TEST(reads_own_maps)
{
	struct procmaps pm;
	size_t i;
	int exe = 0;

	REQUIRE(procmaps__read(getpid(), &pm) == 0);
	for (i = 0; i < pm.nr; i++)
		exe += strstr(pm.maps[i].path, "test_procmaps") != NULL;
	CHECK(exe >= 1);
	CHECK(procmaps__find(&pm, (uint64_t)(uintptr_t)&pm) != NULL);
	procmaps__release(&pm);
	CHECK_EQ(procmaps__read(999999, &pm), -ESRCH);
}

TEST(finds_own_code_and_stack)
{
	struct procmaps pm = {};
	const struct procmap *m;
	char self[4096];
	ssize_t n;
	int local = 0, fd;
	struct stat st;

	REQUIRE(procmaps__read(getpid(), &pm) == 0);
	CHECK(pm.nr > 5);
	m = procmaps__find(&pm, (uintptr_t)&procmaps__read);
	REQUIRE(m);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	REQUIRE(n > 0);
	self[n] = '\0';
	CHECK_STR(m->path, self);
	CHECK(m->x);
	fd = procmaps__open(getpid(), m);
	CHECK(fd >= 0 && !fstat(fd, &st) && st.st_ino == m->inode);
	if (fd >= 0)
		close(fd);
	m = procmaps__find(&pm, (uintptr_t)&local);
	REQUIRE(m);
	CHECK_STR(m->path, "[stack]");
	CHECK(procmaps__find(&pm, 16) == NULL);
	procmaps__release(&pm);
	CHECK_EQ(procmaps__read(999999, &pm), -ESRCH);
}

/* The count follows what the process maps: a mapping split in three counts two more. */
TEST(counts_mappings)
{
	size_t before, after;
	void *p;

	p = mmap(NULL, 3 * 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(p != MAP_FAILED);
	before = procmaps__count(getpid());
	CHECK(before > 5);
	/* Its middle page of other rights, between two of its own: no neighbour to merge with. */
	REQUIRE(!mprotect((char *)p + 4096, 4096, PROT_NONE));
	after = procmaps__count(getpid());
	CHECK_EQ(after, before + 2);
	munmap(p, 3 * 4096);
	CHECK_EQ(procmaps__count(999999), 0);
}

/* A mapped file that was deleted: flagged, path cleaned, still openable (map_files). */
TEST(deleted_files)
{
	char tmpl[] = "/tmp/probing maps XXXXXX";
	struct procmaps pm = {};
	const struct procmap *m;
	void *p;
	int fd, fd2;
	char buf[8] = "";

	fd = mkstemp(tmpl);
	REQUIRE(fd >= 0);
	REQUIRE(write(fd, "content!", 8) == 8);
	p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	REQUIRE(p != MAP_FAILED);
	close(fd);
	unlink(tmpl);
	REQUIRE(procmaps__read(getpid(), &pm) == 0);
	m = procmaps__find(&pm, (uintptr_t)p);
	REQUIRE(m);
	CHECK(m->deleted);
	CHECK_STR(m->path, tmpl); /* spaces in names survive */
	fd2 = procmaps__open(getpid(), m);
	CHECK(fd2 >= 0);
	if (fd2 >= 0) {
		CHECK(read(fd2, buf, 8) == 8 && !memcmp(buf, "content!", 8));
		close(fd2);
	}
	procmaps__release(&pm);
	munmap(p, 4096);
}

TEST_MAIN()
