// SPDX-License-Identifier: MIT
/* pymem: process_vm_readv with partial-read handling. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/uio.h>
#include <unistd.h>

#include "python/pymem.h"

/* /proc/PID/mem, for kernels or sandboxes without process_vm_readv (ENOSYS). */
static ssize_t read_procmem(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	char path[64];
	ssize_t n, done = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	while ((size_t)done < len) {
		n = pread(fd, (char *)buf + done, len - done, (off_t)(addr + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int err = n < 0 ? errno : 0;

			close(fd);
			/* EIO: the address is not mapped. */
			return done ? done : (err == EIO || err == 0 ? 0 : -err);
		}
		done += n;
	}
	close(fd);
	return done;
}

ssize_t pymem_read_partial(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		struct iovec local = {(char *)buf + done, len - done};
		struct iovec remote = {(void *)(uintptr_t)(addr + done), len - done};
		ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ENOSYS)
				return read_procmem(pid, addr, buf, len);
			if (errno == EFAULT)
				break; /* the rest is unmapped */
			return -errno;
		}
		if (n == 0)
			break;
		/* A short read stops at the first unmapped page; the next call says EFAULT. */
		done += (size_t)n;
	}
	return (ssize_t)done;
}

int pymem_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	ssize_t n;

	if (!len)
		return 0;
	if (!addr)
		return -EFAULT;
	n = pymem_read_partial(pid, addr, buf, len);
	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EFAULT;
}

int pymem_read_u64(pid_t pid, uint64_t addr, uint64_t *out)
{
	return pymem_read(pid, addr, out, sizeof(*out));
}

int pymem_read_u32(pid_t pid, uint64_t addr, uint32_t *out)
{
	return pymem_read(pid, addr, out, sizeof(*out));
}
