// SPDX-License-Identifier: MIT
#include <errno.h>
#include <limits.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "base/cli.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/util.h"
#include "record/preflight.h"

#define CMD "record"

int preflight_target(pid_t pid, bool kernel)
{
	char name[64];

	if (cli_check_pid(CMD, pid))
		return EXIT_FAIL;
	if (kernel || procinfo_is_kernel_thread(pid) != 1)
		return 0;
	log_cmd(CMD,
		"process %d (%s) is a kernel thread: it has no user space, so there is no user "
		"stack and no Python to sample.",
		(int)pid, procinfo_comm_shown(pid, name, sizeof(name)));
	fputs("Add --kernel to record its kernel stacks.\n", stderr);
	return EXIT_FAIL;
}

int preflight_privileges(void)
{
	char missing[128] = "";
	pid_t self = getpid();
	bool admin;

	if (geteuid() == 0)
		return 0;
	admin = procinfo_has_cap(self, CAP_SYS_ADMIN);
	if (!admin && !procinfo_has_cap(self, CAP_BPF))
		strcat(missing, " CAP_BPF");
	if (!admin && !procinfo_has_cap(self, CAP_PERFMON))
		strcat(missing, " CAP_PERFMON");
	if (!procinfo_has_cap(self, CAP_SYS_PTRACE))
		strcat(missing, " CAP_SYS_PTRACE");
	if (!missing[0])
		return 0;
	log_cmd(CMD, "not running as root, and missing the capabilities:%s.", missing);
	fputs("Recording loads BPF programs (CAP_BPF), opens perf events on every CPU "
	      "(CAP_PERFMON) and\nreads the targets' memory maps and stacks (CAP_SYS_PTRACE). "
	      "Run it with sudo.\n",
	      stderr);
	return EXIT_FAIL;
}

#define PROC_PID_INIT_INO 0xEFFFFFFCu /* include/linux/proc_ns.h: the initial PID namespace */

int preflight_pidns(__u32 *inum)
{
	char buf[32];
	struct stat sb;
	ssize_t n;
	long self = 0;

	n = readlink("/proc/self", buf, sizeof(buf) - 1);
	if (n > 0)
		buf[n] = '\0';
	if (n <= 0 || parse_long(buf, 1, INT_MAX, &self) || stat("/proc/self/ns/pid", &sb)) {
		log_cmd(CMD, "cannot read /proc/self (%s); recording needs /proc",
			n <= 0 ? strerror(errno) : "unexpected contents");
		return EXIT_FAIL;
	}
	if (self != getpid()) {
		log_cmd(CMD,
			"/proc belongs to another PID namespace than probing: it calls this "
			"process %ld, the process itself %d.",
			self, (int)getpid());
		fputs("The recorder matches what it samples with /proc. Mount a /proc for this "
		      "namespace (unshare --pid --fork --mount-proc ...), or run probing outside "
		      "it.\n",
		      stderr);
		return EXIT_FAIL;
	}
	*inum = sb.st_ino == PROC_PID_INIT_INO ? 0 : (__u32)sb.st_ino;
	if (*inum)
		pr_info("in PID namespace %u: pids are this namespace's", *inum);
	return 0;
}
