// SPDX-License-Identifier: MIT
/* pltstub: the PLT stubs' names checked against objdump's (binutils synthesizes them on its
 * own, from the same relocations), and robustness against damaged files. */
#include <fcntl.h>
#include <libelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/procmaps.h"
#include "base/util.h"
#include "native/pltstub.h"
#include "test.h"

/* Our libc's path, into @path. */
static int self_libc(char *path, size_t size)
{
	struct procmaps pm = {};
	int i, found = 0;

	if (procmaps__read(getpid(), &pm))
		return 0;
	for (i = 0; i < (int)pm.nr && !found; i++)
		if (!strcmp(procmaps__basename(&pm.maps[i]), "libc.so.6")) {
			snprintf(path, size, "%s", pm.maps[i].path);
			found = 1;
		}
	procmaps__release(&pm);
	return found;
}

/* The IFUNC symbols of @path as nm (binutils) reads its tables: "ADDR NAME" lines. */
static char *nm_ifuncs(const char *path)
{
	char cmd[PATH_MAX + 128], line[512], sym[256], type;
	unsigned long long a;
	size_t size = 0;
	char *out = NULL;
	FILE *p, *mem;

	snprintf(cmd, sizeof(cmd), "{ nm -D '%s'; nm '%s'; } 2>/dev/null", path, path);
	p = popen(cmd, "r");
	mem = open_memstream(&out, &size);
	if (!p || !mem) {
		if (p)
			pclose(p);
		if (mem)
			fclose(mem);
		free(out);
		return NULL;
	}
	fputc('\n', mem);
	while (fgets(line, sizeof(line), p))
		if (sscanf(line, "%llx %c %255[^@\n]", &a, &type, sym) == 3 &&
		    (type == 'i' || type == 'I'))
			fprintf(mem, "%llx %s@plt\n", a, sym);
	pclose(p);
	fclose(mem);
	return out;
}

/* Check every stub objdump names in @path; return how many it names. */
static int check_against_objdump(const char *path)
{
	char cmd[PATH_MAX + 128], line[512], name[256], want[300];
	char *ifuncs = nm_ifuncs(path);
	unsigned long long addr;
	struct pltstubs *ps;
	int fd, n = 0;
	Elf *elf;
	FILE *p;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	ps = pltstubs__new(elf);
	if (!ps) {
		TEST_FAIL_("pltstubs__new(%s)", path);
		goto out;
	}
	snprintf(cmd, sizeof(cmd), "objdump -d -j .plt -j .plt.sec -j .plt.got '%s' 2>/dev/null",
		 path);
	p = popen(cmd, "r");
	if (!p) {
		TEST_FAIL_("popen objdump");
		goto out;
	}
	while (fgets(line, sizeof(line), p)) {
		const char *got, *mid;
		unsigned long long ifunc;

		/* "0000000000001030 <dlerror@plt>:" */
		if (sscanf(line, "%llx <%255[^>]>:", &addr, name) != 2 || !strstr(name, "@plt") ||
		    strchr(name, '-'))
			continue;
		n++;
		got = pltstubs__name(ps, addr);
		mid = pltstubs__name(ps, addr + 7);
		/* "<*ABS*+0x9f550@plt>": a local IFUNC's slot, named by the IFUNC symbol there. */
		if (sscanf(name, "*ABS*+%llx@plt", &ifunc) == 1) {
			snprintf(want, sizeof(want), "\n%llx %s\n", ifunc, got ? got : "");
			if (!got || !mid || strcmp(got, mid) || !ifuncs || !strstr(ifuncs, want))
				TEST_FAIL_("%s: %#llx is %s, named %s", path, addr, name,
					   got ? got : "(none)");
			continue;
		}
		if (!got || strcmp(got, name) || !mid || strcmp(mid, name))
			TEST_FAIL_("%s: %#llx is %s, named %s / %s", path, addr, name,
				   got ? got : "(none)", mid ? mid : "(none)");
	}
	pclose(p);
	CHECK_EQ((size_t)n, pltstubs__count(ps));
out:
	free(ifuncs);
	pltstubs__free(ps);
	elf_end(elf);
	close(fd);
	return n;
}

TEST(names_as_objdump_does)
{
	char libc[PATH_MAX], self[PATH_MAX];
	ssize_t len;

	elf_version(EV_CURRENT);
	REQUIRE(self_libc(libc, sizeof(libc)));
	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	REQUIRE(len > 0);
	self[len] = 0;
	/* This binary calls printf, popen, snprintf... through its PLT; libc has a few stubs. */
	CHECK(check_against_objdump(self) >= 5);
	CHECK(check_against_objdump(libc) >= 1);
}

TEST(unnamed_addresses)
{
	struct pltstubs *ps;
	int fd;
	Elf *elf;

	elf_version(EV_CURRENT);
	fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	REQUIRE(fd >= 0);
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	ps = pltstubs__new(elf);
	REQUIRE(ps);
	CHECK(!pltstubs__name(ps, 0));
	CHECK(!pltstubs__name(ps, (uint64_t)-1));
	pltstubs__free(ps);
	elf_end(elf);
	close(fd);
	/* No ELF at all, and a NULL table. */
	ps = pltstubs__new(NULL);
	REQUIRE(ps);
	CHECK_EQ(pltstubs__count(ps), (size_t)0);
	pltstubs__free(ps);
	CHECK(!pltstubs__name(NULL, 0x1000));
}

/* Copies of libc with bytes damaged must never crash the reader. */
TEST(survives_damaged_files)
{
	char libc[PATH_MAX];
	unsigned char *data;
	size_t len, i;
	int round;

	elf_version(EV_CURRENT);
	REQUIRE(self_libc(libc, sizeof(libc)));
	data = (unsigned char *)read_file(libc, 0, &len);
	REQUIRE(data);
	srand(42);
	for (round = 0; round < 300; round++) {
		unsigned char *copy = malloc(len);
		size_t n = round % 3 == 0 ? (size_t)rand() % 4096 : len; /* truncated files too */
		struct pltstubs *ps;
		Elf *elf;

		REQUIRE(copy);
		memcpy(copy, data, len);
		for (i = 0; i < 64; i++) /* damage the headers, tables and strings */
			copy[(size_t)rand() % (round % 2 ? 65536 : len)] = rand();
		elf = elf_memory((char *)copy, n);
		ps = pltstubs__new(elf);
		for (i = 0; ps && i < pltstubs__count(ps) + 64; i++)
			pltstubs__name(ps, (uint64_t)rand() % (len + 4096));
		pltstubs__free(ps);
		elf_end(elf);
		free(copy);
	}
	free(data);
}

TEST_MAIN()
