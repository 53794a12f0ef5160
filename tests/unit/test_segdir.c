// SPDX-License-Identifier: MIT
/* segdir: a watch's segments measured from the files themselves, a complete one's size kept
 * once it no longer changes, the oldest removed past --max-size. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "watch/segdir.h"
#include "test.h"

/* Write @n bytes (real blocks, not a hole) at the end of @path. */
static int append(const char *path, size_t n)
{
	char buf[4096];
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	size_t done = 0;

	if (fd < 0)
		return -1;
	memset(buf, 'x', sizeof(buf));
	while (done < n) {
		size_t k = n - done < sizeof(buf) ? n - done : sizeof(buf);

		if (write(fd, buf, k) != (ssize_t)k)
			break;
		done += k;
	}
	fsync(fd);
	close(fd);
	return done == n ? 0 : -1;
}

TEST(sizes_from_the_files_and_kept_once_settled)
{
	char dir[] = "/tmp/probing-segdir-XXXXXX", a[4096], b[4096], part[4200], side[4200];
	struct segdir *sd = NULL;

	REQUIRE(mkdtemp(dir));
	REQUIRE(segdir__open("test", dir, &sd) == 0);
	CHECK_EQ(segdir__bytes(sd), 0);
	REQUIRE(segdir__next_segment(sd, a, sizeof(a)) == 0);
	snprintf(part, sizeof(part), "%s.partial", a);
	REQUIRE(append(part, 8192) == 0);
	CHECK_EQ(segdir__current_bytes(sd), 8192);
	/* Rotated: the first is renamed, its -wal still there for a moment. */
	REQUIRE(segdir__next_segment(sd, b, sizeof(b)) == 0);
	REQUIRE(rename(part, a) == 0);
	snprintf(side, sizeof(side), "%s-wal", a);
	REQUIRE(append(side, 4096) == 0);
	CHECK_EQ(segdir__current_bytes(sd), 0);
	CHECK_EQ(segdir__bytes(sd), 8192 + 4096);
	/* Its -wal gone: settled, its size kept (a change after that is not looked up). */
	REQUIRE(unlink(side) == 0);
	CHECK_EQ(segdir__bytes(sd), 8192);
	REQUIRE(append(a, 4096) == 0);
	CHECK_EQ(segdir__bytes(sd), 8192);
	/* The current one is measured each time. */
	snprintf(part, sizeof(part), "%s.partial", b);
	REQUIRE(append(part, 4096) == 0);
	CHECK_EQ(segdir__current_bytes(sd), 4096);
	CHECK_EQ(segdir__bytes(sd), 8192 + 4096);
	REQUIRE(append(part, 4096) == 0);
	CHECK_EQ(segdir__bytes(sd), 8192 + 8192);
	/* Past --max-size (the current one's room is a third of it): the oldest is removed. */
	CHECK_EQ(segdir__prune(sd, 3600, 16000), 1);
	CHECK(access(a, F_OK) != 0);
	CHECK_EQ(segdir__bytes(sd), 8192);
	CHECK_EQ(segdir__prune(sd, 3600, 16000), 0); /* never the current one */
	segdir__free(sd);
	unlink(part);
	snprintf(part, sizeof(part), "%s/%s", dir, SEGDIR_LOCK);
	unlink(part);
	CHECK_EQ(rmdir(dir), 0);
}

TEST_MAIN()
