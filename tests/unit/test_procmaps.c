// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "procmaps.h"
#include "test.h"

TEST(finds_own_code_and_stack)
{
	struct procmaps pm = {0};
	const struct mapping *m;
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
	CHECK(m->perms[2] == 'x');
	fd = procmaps__open(getpid(), m);
	CHECK(fd >= 0 && !fstat(fd, &st) && st.st_ino == m->ino);
	if (fd >= 0)
		close(fd);
	m = procmaps__find(&pm, (uintptr_t)&local);
	REQUIRE(m);
	CHECK_STR(m->path, "[stack]");
	CHECK(procmaps__find(&pm, 16) == NULL);
	procmaps__free(&pm);
	CHECK_EQ(procmaps__read(999999, &pm), -ESRCH);
}

/* A mapped file that was deleted: flagged, path cleaned, still openable (map_files). */
TEST(deleted_files)
{
	char tmpl[] = "/tmp/probing maps XXXXXX";
	struct procmaps pm = {0};
	const struct mapping *m;
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
	procmaps__free(&pm);
	munmap(p, 4096);
}

TEST_MAIN()
