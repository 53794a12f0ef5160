/* SPDX-License-Identifier: MIT */
/*
 * pymem: read another process's memory with process_vm_readv (one syscall, no ptrace stop:
 * the target keeps running). Falls back to /proc/PID/mem where process_vm_readv is missing.
 */
#ifndef PROBING_PYMEM_H
#define PROBING_PYMEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Read exactly @len bytes at @addr of process @pid into @buf. Return 0, -EFAULT (part of the
 * range is not mapped: nothing useful was read), -ESRCH (the process is gone), -EPERM (not
 * allowed to read it) or another -errno.
 */
int pymem_read(pid_t pid, uint64_t addr, void *buf, size_t len);

/*
 * Read up to @len bytes, stopping at the first unreadable byte. Return the number of bytes
 * read (0 if the first byte is unreadable) or -ESRCH / -EPERM / -errno.
 */
ssize_t pymem_read_partial(pid_t pid, uint64_t addr, void *buf, size_t len);

/* Convenience: one pointer-sized / 32-bit value. Same returns as pymem_read(). */
int pymem_read_u64(pid_t pid, uint64_t addr, uint64_t *out);
int pymem_read_u32(pid_t pid, uint64_t addr, uint32_t *out);

#endif
