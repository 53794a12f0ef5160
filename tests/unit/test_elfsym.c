// SPDX-License-Identifier: MIT
/* elfsym: dynamic symbol lookup with versions, checked against the loader's own answers
 * (dlsym/dlvsym in this very process), and robustness against malformed files. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "injector/elfsym.h"
#include "base/procmaps.h"
#include "test.h"

/* Our libc's offset-0 mapping. */
static const struct procmap *self_libc(struct procmaps *pm)
{
	int i;

	if (procmaps__read(getpid(), pm))
		return NULL;
	for (i = 0; i < (int)pm->nr; i++)
		if (!pm->maps[i].offset && !strcmp(procmaps__basename(&pm->maps[i]), "libc.so.6"))
			return &pm->maps[i];
	return NULL;
}

TEST(matches_the_loader_for_libc)
{
	struct procmaps pm = {};
	const struct procmap *m = self_libc(&pm);
	struct elfsym *e;
	uint64_t bias, v, size;
	static const char *const names[] = {"malloc", "free",		"dlerror",
					    "getpid", "pthread_create", "printf"};
	size_t i;

	REQUIRE(m);
	e = elfsym__open(m->path);
	REQUIRE(e);
	CHECK(elfsym__is_dyn(e));
	CHECK_STR(elfsym__soname(e), "libc.so.6");
	REQUIRE(elfsym__bias(e, m->start, m->offset, &bias) == 0);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		CHECK_EQ(elfsym__lookup(e, names[i], NULL, &v, &size), 0);
		CHECK_EQ(bias + v, (uintptr_t)dlsym(RTLD_DEFAULT, names[i]));
		CHECK(size > 0);
	}
	/* dlopen has two versions in glibc >= 2.34: the default (what an unversioned
	 * reference binds to) and the compat one of old binaries. */
	CHECK_EQ(elfsym__lookup(e, "dlopen", NULL, &v, NULL), 0);
	CHECK_EQ(bias + v, (uintptr_t)dlsym(RTLD_DEFAULT, "dlopen"));
	CHECK_EQ(elfsym__lookup(e, "dlopen", "GLIBC_2.2.5", &v, NULL), 0);
	CHECK_EQ(bias + v, (uintptr_t)dlvsym(RTLD_DEFAULT, "dlopen", "GLIBC_2.2.5"));
	CHECK_EQ(elfsym__lookup(e, "dlopen", "GLIBC_2.34", &v, NULL), 0);
	CHECK_EQ(bias + v, (uintptr_t)dlvsym(RTLD_DEFAULT, "dlopen", "GLIBC_2.34"));
	CHECK_EQ(elfsym__lookup(e, "dlopen", "GLIBC_9.99", &v, NULL), -ENOENT);
	CHECK_EQ(elfsym__lookup(e, "no_such_symbol_at_all", NULL, &v, NULL), -ENOENT);
	/* An undefined reference is not a definition (libc imports from ld.so). */
	CHECK_EQ(elfsym__lookup(e, "_dl_argv", NULL, &v, NULL), -ENOENT);
	elfsym__free(e);
	procmaps__release(&pm);
}

TEST(rejects_what_is_not_an_elf64)
{
	struct elfsym *e;

	errno = 0;
	e = elfsym__open("/etc/passwd");
	CHECK(!e && errno == ENOEXEC);
	e = elfsym__open("/nonexistent/file");
	CHECK(!e && errno == ENOENT);
	e = elfsym__open("/proc/self");
	CHECK(!e);
}

/* Copies of libc with bytes damaged must never crash the reader. */
TEST(survives_damaged_files)
{
	struct procmaps pm = {};
	const struct procmap *m = self_libc(&pm);
	char tmpl[] = "/tmp/probing-elfsym-XXXXXX";
	unsigned char *data;
	size_t len, i;
	int fd, round;
	FILE *f;

	REQUIRE(m);
	f = fopen(m->path, "rb");
	REQUIRE(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	data = malloc(len);
	REQUIRE(data && fread(data, 1, len, f) == len);
	fclose(f);
	fd = mkstemp(tmpl);
	REQUIRE(fd >= 0);
	srand(42);
	for (round = 0; round < 300; round++) {
		unsigned char *copy = malloc(len);
		size_t n = round % 3 == 0 ? (size_t)rand() % 4096 : len; /* truncated files too */
		struct elfsym *e;
		uint64_t v;

		memcpy(copy, data, len);
		for (i = 0; i < 64; i++) /* damage the headers, tables and strings */
			copy[(size_t)rand() % (round % 2 ? 65536 : len)] = rand();
		if (ftruncate(fd, 0) || pwrite(fd, copy, n, 0) != (ssize_t)n)
			TEST_FAIL_("write");
		e = elfsym__open_fd(fd);
		if (e) {
			elfsym__lookup(e, "dlopen", NULL, &v, NULL);
			elfsym__lookup(e, "dlopen", "GLIBC_2.2.5", &v, NULL);
			elfsym__lookup(e, "malloc", NULL, &v, NULL);
			elfsym__soname(e);
			elfsym__bias(e, 0x7f0000000000ULL, 0, &v);
		}
		elfsym__free(e);
		free(copy);
	}
	close(fd);
	unlink(tmpl);
	free(data);
	procmaps__release(&pm);
}

TEST_MAIN()
