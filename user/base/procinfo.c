// SPDX-License-Identifier: MIT
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/escape.h"
#include "base/procinfo.h"
#include "base/util.h"

/* /proc/@pid/@file, or /proc/@pid/task/@tid/@file when @tid is not 0, into @path. */
static void proc_path(char *path, size_t size, pid_t pid, pid_t tid, const char *file)
{
	if (tid)
		snprintf(path, size, "/proc/%d/task/%d/%s", (int)pid, (int)tid, file);
	else
		snprintf(path, size, "/proc/%d/%s", (int)pid, file);
}

/*
 * /proc/@pid[/task/@tid]/stat past the comm, malloc'd into *@text: the returned pointer is
 * the space before the state letter. "pid (comm) S ...": comm may hold spaces and ')', so
 * the fields start after the last ')'. NULL with errno set.
 */
static char *stat_fields(pid_t pid, pid_t tid, char **text)
{
	char path[96], *p;

	proc_path(path, sizeof(path), pid, tid, "stat");
	*text = read_file(path, 4096, NULL);
	if (!*text)
		return NULL;
	p = strrchr(*text, ')');
	if (!p || p[1] != ' ') {
		free(*text);
		*text = NULL;
		errno = EINVAL;
		return NULL;
	}
	return p + 1;
}

char procinfo_state(pid_t pid, pid_t tid)
{
	char *text, *p = stat_fields(pid, tid, &text), state;

	if (!p)
		return 0;
	state = p[1];
	free(text);
	return state;
}

int procinfo_stat_field(pid_t pid, pid_t tid, int n, unsigned long long *out)
{
	char *text, *p = stat_fields(pid, tid, &text), *tok, *save = NULL;
	int i, err = -EINVAL;

	if (!p)
		return -errno;
	for (i = 3, tok = strtok_r(p, " ", &save); tok; i++, tok = strtok_r(NULL, " ", &save)) {
		if (i == n) {
			*out = strtoull(tok, NULL, 10);
			err = 0;
			break;
		}
	}
	free(text);
	return err;
}

char *procinfo_status_field(pid_t pid, pid_t tid, const char *key)
{
	char path[96], *text, *p, *end, *val = NULL;
	size_t klen = strlen(key);
	int err = ENOENT;

	proc_path(path, sizeof(path), pid, tid, "status");
	text = read_file(path, 1 << 16, NULL);
	if (!text)
		return NULL;
	for (p = text; *p; p = *end ? end + 1 : end) {
		end = strchrnul(p, '\n');
		if (strncmp(p, key, klen) || p[klen] != ':')
			continue;
		p += klen + 1;
		p += strspn(p, " \t");
		val = strndup(p, end - p);
		err = val ? 0 : ENOMEM;
		break;
	}
	free(text);
	if (!val)
		errno = err;
	return val;
}

int procinfo_status_numbers(pid_t pid, pid_t tid, const char *const *keys, size_t n, int base,
			    unsigned long long *out)
{
	unsigned long long vals[PROCINFO_STATUS_MAX];
	char path[96], *text, *p, *end, *num;
	size_t i, found = 0;
	uint64_t seen = 0;
	int err = 0;

	if (!n || n > PROCINFO_STATUS_MAX)
		return -EINVAL;
	proc_path(path, sizeof(path), pid, tid, "status");
	text = read_file(path, 1 << 16, NULL);
	if (!text)
		return -errno;
	for (p = text; *p && found < n && !err; p = *end ? end + 1 : end) {
		end = strchrnul(p, '\n');
		for (i = 0; i < n; i++) {
			size_t klen = strlen(keys[i]);

			if ((seen >> i & 1) || strncmp(p, keys[i], klen) || p[klen] != ':')
				continue;
			p += klen + 1;
			p += strspn(p, " \t");
			errno = 0;
			vals[i] = strtoull(p, &num, base);
			if (num == p || num > end || errno)
				err = -EINVAL;
			seen |= 1ULL << i;
			found++;
			break;
		}
	}
	free(text);
	if (!err && found < n)
		err = -ENOENT;
	if (!err)
		memcpy(out, vals, n * sizeof(*out));
	return err;
}

int procinfo_status_number(pid_t pid, pid_t tid, const char *key, int base, unsigned long long *out)
{
	return procinfo_status_numbers(pid, tid, &key, 1, base, out);
}

long procinfo_uid(pid_t pid)
{
	unsigned long long uid;
	int err = procinfo_status_number(pid, 0, "Uid", 10, &uid);

	return err ? err : (long)uid;
}

bool procinfo_has_cap(pid_t pid, int cap)
{
	unsigned long long eff = 0;

	procinfo_status_number(pid, 0, "CapEff", 16, &eff);
	return cap >= 0 && cap < 64 && ((eff >> cap) & 1);
}

bool procinfo_alive(pid_t pid)
{
	return procinfo_state_alive(procinfo_state(pid, 0));
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
	unsigned long long ppid;
	int err = procinfo_stat_field(pid, 0, 4, &ppid);

	return err ? err : (pid_t)ppid;
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

const char *procinfo_comm_shown(pid_t pid, char *buf, size_t size)
{
	struct strbuf e = {0};
	char name[64];

	if (procinfo_thread_name(pid, pid, name, sizeof(name)))
		snprintf(buf, size, "?");
	else
		snprintf(buf, size, "%s", text_str(&e, name, 0));
	sb_free(&e);
	return buf;
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

#define PF_KTHREAD 0x00200000 /* include/linux/sched.h */

int procinfo_is_kernel_thread(pid_t pid)
{
	unsigned long long flags;
	int err = procinfo_stat_field(pid, 0, 9, &flags);

	return err ? err : !!(flags & PF_KTHREAD);
}

char procinfo_state_cpu(pid_t pid, long long *ticks)
{
	char *text, *p = stat_fields(pid, 0, &text), *tok, *save = NULL, state;
	unsigned long long sum = 0;
	int i, got = 0;

	if (!p)
		return 0;
	state = p[1];
	/* utime and stime: fields 14 and 15 (the state is field 3). */
	for (i = 3, tok = strtok_r(p, " ", &save); tok && i <= 15;
	     i++, tok = strtok_r(NULL, " ", &save)) {
		if (i >= 14) {
			sum += strtoull(tok, NULL, 10);
			got++;
		}
	}
	free(text);
	*ticks = got == 2 ? (long long)sum : -EINVAL;
	return state;
}

long long procinfo_cpu_ticks(pid_t pid)
{
	long long ticks;

	return procinfo_state_cpu(pid, &ticks) ? ticks : -errno;
}

pid_t procinfo_ns_pid(pid_t pid)
{
	char *val = procinfo_status_field(pid, 0, "NSpid"), *tok, *save = NULL;
	long last = -EINVAL;

	if (!val)
		return -errno;
	/* "NSpid:\t1234\t7": one pid per namespace, outermost first. */
	for (tok = strtok_r(val, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save))
		last = strtol(tok, NULL, 10);
	free(val);
	return last > 0 ? (pid_t)last : -EINVAL;
}

int procinfo_start_stack(pid_t pid, uint64_t *start_stack)
{
	unsigned long long v;
	int err = procinfo_stat_field(pid, 0, 28, &v);

	if (!err)
		*start_stack = v;
	return err;
}
