/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The user context of the current task, for BPF programs that send a stack to userspace the
 * way the sampler does (sampler.bpf.c, comm.bpf.c): its pids as the recorder numbers them;
 * its registers and stack copy come from uregs.bpf.h.
 *
 * For inclusion after vmlinux.h, bpf_helpers.h, bpf_core_read.h, bpf_tracing.h and sampler.h.
 * The includer defines, before the inclusion:
 *
 *   const volatile __u32 pidns_inum;   the recorder's PID namespace (0: the initial one)
 *   __u32 pidns_level;                 its level, learned here (0 until then)
 *
 * Pids are numbered as the recorder's PID namespace numbers them (sampler.h): the kernel's
 * numbers when it runs in the initial namespace; otherwise they are looked up in the tasks'
 * struct pid, so that a recorder inside a container matches the pids it sees in its /proc.
 */
#ifndef PROBING_UCTX_BPF_H
#define PROBING_UCTX_BPF_H

#define MAX_PIDNS_LEVEL 32 /* the kernel's limit on nested PID namespaces */

#include "uregs.bpf.h"

/* The upid (number, namespace) of @pid at namespace level @level. */
static __always_inline int read_upid(struct pid *pid, __u32 level, int *nr,
				     struct pid_namespace **ns)
{
	const __u8 *u = (const __u8 *)pid + bpf_core_field_offset(struct pid, numbers) +
			(__u64)level * bpf_core_type_size(struct upid);

	if (bpf_probe_read_kernel(nr, sizeof(*nr), u + bpf_core_field_offset(struct upid, nr)))
		return -1;
	return bpf_probe_read_kernel(ns, sizeof(*ns), u + bpf_core_field_offset(struct upid, ns));
}

/* The number @pid has in the recorder's PID namespace; 0 if it has none there. */
static __always_inline __u32 view_nr(struct pid *pid)
{
	struct pid_namespace *ns;
	__u32 level, i;
	int nr;

	if (!pid)
		return 0;
	level = BPF_CORE_READ(pid, level);
	if (pidns_level) {
		if (level < pidns_level || read_upid(pid, pidns_level, &nr, &ns) ||
		    BPF_CORE_READ(ns, ns.inum) != pidns_inum)
			return 0;
		return nr;
	}
	for (i = 1; i <= MAX_PIDNS_LEVEL; i++) {
		if (i > level)
			break;
		if (read_upid(pid, i, &nr, &ns))
			return 0;
		if (BPF_CORE_READ(ns, ns.inum) == pidns_inum) {
			pidns_level = i;
			return nr;
		}
	}
	return 0;
}

/* The number @pid has in its own (innermost) PID namespace. */
static __always_inline __u32 own_nr(struct pid *pid)
{
	struct pid_namespace *ns;
	int nr;

	if (!pid || read_upid(pid, BPF_CORE_READ(pid, level), &nr, &ns))
		return 0;
	return nr;
}

struct task_ids {
	__u32 pid, tid;	      /* as the recorder numbers them */
	__u32 ns_pid, ns_tid; /* in the task's own namespace */
};

/* The pid (tgid) and tid of @task in the recorder's PID namespace; 0 where it has none. */
static __always_inline void view_ids(struct task_struct *task, struct task_ids *ids)
{
	if (!pidns_inum) {
		ids->pid = BPF_CORE_READ(task, tgid);
		ids->tid = BPF_CORE_READ(task, pid);
		return;
	}
	ids->pid = view_nr(BPF_CORE_READ(task, group_leader, thread_pid));
	ids->tid = view_nr(BPF_CORE_READ(task, thread_pid));
}

/* ids->ns_pid and ns_tid of @task; its view ids must be set. */
static __always_inline void own_ids(struct task_struct *task, struct task_ids *ids)
{
	struct pid *tp = BPF_CORE_READ(task, thread_pid);

	/* In the recorder's own namespace (the common case) the numbers are the same. */
	if (tp && BPF_CORE_READ(tp, level) == (pidns_inum ? pidns_level : 0)) {
		ids->ns_pid = ids->pid;
		ids->ns_tid = ids->tid;
		return;
	}
	ids->ns_tid = own_nr(tp);
	ids->ns_pid = own_nr(BPF_CORE_READ(task, group_leader, thread_pid));
}

#endif
