// SPDX-License-Identifier: MIT
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/procinfo.h"
#include "base/util.h"

/* The state letter from /proc/PID/stat, 0 if unreadable. */
static char proc_state(pid_t pid)
{
	char path[64], *text, *p, state = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	text = read_file(path, 4096, NULL);
	if (!text)
		return 0;
	/* "pid (comm) S ...": comm may contain spaces and ')' — use the last ')'. */
	p = strrchr(text, ')');
	if (p && p[1] == ' ')
		state = p[2];
	free(text);
	return state;
}

bool procinfo_alive(pid_t pid)
{
	char state = proc_state(pid);

	return state && state != 'Z' && state != 'X';
}

char *procinfo_cmdline(pid_t pid)
{
	char path[64], *text;
	size_t len, i;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	text = read_file(path, 1 << 16, &len);
	if (!text)
		return NULL;
	while (len && text[len - 1] == '\0')
		len--;
	for (i = 0; i < len; i++)
		if (text[i] == '\0')
			text[i] = ' ';
	text[len] = '\0';
	return text;
}

char *procinfo_exe(pid_t pid)
{
	char path[64], buf[PATH_MAX];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	n = readlink(path, buf, sizeof(buf) - 1);
	if (n < 0)
		return NULL;
	buf[n] = '\0';
	return strdup(buf);
}

pid_t procinfo_ppid(pid_t pid)
{
	char path[64], *text, *p;
	int ppid = -1;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	text = read_file(path, 4096, NULL);
	if (!text)
		return -errno;
	p = strrchr(text, ')');
	if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
		ppid = -EINVAL;
	free(text);
	return ppid;
}

int procinfo_thread_name(pid_t pid, pid_t tid, char *buf, size_t size)
{
	char path[64], *text;
	size_t len;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)pid, (int)tid);
	text = read_file(path, 256, &len);
	if (!text)
		return -errno;
	while (len && text[len - 1] == '\n')
		text[--len] = '\0';
	snprintf(buf, size, "%s", text);
	free(text);
	return 0;
}

char *procinfo_getenv(pid_t pid, const char *name)
{
	char path[64], *text, *p, *val = NULL;
	size_t len, nlen = strlen(name);

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	text = read_file(path, 1 << 20, &len);
	if (!text)
		return NULL;
	for (p = text; p < text + len; p += strlen(p) + 1) {
		if (!strncmp(p, name, nlen) && p[nlen] == '=') {
			val = strdup(p + nlen + 1);
			break;
		}
	}
	free(text);
	if (!val)
		errno = ENOENT;
	return val;
}

long procinfo_uid(pid_t pid)
{
	char path[64], *text, *p;
	long uid = -EINVAL;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	text = read_file(path, 1 << 16, NULL);
	if (!text)
		return -errno;
	p = strstr(text, "\nUid:");
	if (p)
		uid = strtol(p + 5, NULL, 10);
	free(text);
	return uid;
}

/* Field @n (1-based, as proc(5) numbers them; n >= 3) of /proc/PID/stat as a number. */
static int stat_field(pid_t pid, int n, unsigned long long *out)
{
	char path[64], *text, *p, *tok, *save = NULL;
	int i, err = -EINVAL;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	text = read_file(path, 4096, NULL);
	if (!text)
		return -errno;
	/* "pid (comm) S ...": comm may contain spaces and ')' — count from the last ')'. */
	p = strrchr(text, ')');
	if (p) {
		for (i = 3, tok = strtok_r(p + 1, " ", &save); tok;
		     i++, tok = strtok_r(NULL, " ", &save)) {
			if (i == n) {
				*out = strtoull(tok, NULL, 10);
				err = 0;
				break;
			}
		}
	}
	free(text);
	return err;
}

#define PF_KTHREAD 0x00200000 /* include/linux/sched.h */

int procinfo_is_kernel_thread(pid_t pid)
{
	unsigned long long flags;
	int err = stat_field(pid, 9, &flags);

	return err ? err : !!(flags & PF_KTHREAD);
}

long long procinfo_cpu_ticks(pid_t pid)
{
	unsigned long long utime, stime;
	int err = stat_field(pid, 14, &utime);

	if (!err)
		err = stat_field(pid, 15, &stime);
	return err ? err : (long long)(utime + stime);
}

pid_t procinfo_ns_pid(pid_t pid)
{
	char path[64], *text, *p, *end, *tok, *save = NULL;
	long last = -EINVAL;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	text = read_file(path, 1 << 16, NULL);
	if (!text)
		return -errno;
	p = strstr(text, "\nNSpid:");
	if (p) {
		end = strchr(p + 1, '\n');
		if (end)
			*end = '\0';
		for (tok = strtok_r(p + 7, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save))
			last = strtol(tok, NULL, 10);
	}
	free(text);
	return last > 0 ? (pid_t)last : -EINVAL;
}

int procinfo_start_stack(pid_t pid, uint64_t *start_stack)
{
	unsigned long long v;
	int err = stat_field(pid, 28, &v);

	if (!err)
		*start_stack = v;
	return err;
}
