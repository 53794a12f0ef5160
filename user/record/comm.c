// SPDX-License-Identifier: MIT
/* The probes on collective communication libraries: finding, attaching, detaching them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "base/bmap.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/procmaps.h"
#include "base/util.h"
#include "comm.skel.h"
#include "python/pyelf.h"
#include "record/comm.h"
#include "record/torchlayout.h"

/* linux/bpf.h of Linux 6.6 (Debian 12's uapi headers predate uprobe_multi links). */
#define ATTACH_UPROBE_MULTI 48 /* BPF_TRACE_UPROBE_MULTI */

/* A probe point: a function of a library, what it is (cookie) and what it is called. */
struct spec {
	const char *sym;  /* mangled, as in .dynsym */
	const char *what; /* for messages */
	unsigned char role, op, arg;
};

#define GLOO(role, op, arg, sym, what)                      \
	{                                                   \
		sym, what, COMM_R_##role, COMM_OP_##op, arg \
	}
#define NCCL(role, op, arg, sym)                 \
	{                                        \
		sym, sym, COMM_R_##role, op, arg \
	}

static const struct spec specs[] = {
	/* c10d::ProcessGroupGloo (libtorch_cpu). Every collective returns
	 * c10::intrusive_ptr<Work> by value: argument 1 is the hidden return slot, 2 `this`. */
	GLOO(GLOO_CALL, ALLREDUCE, 3,
	     "_ZN4c10d16ProcessGroupGloo9allreduceERSt6vectorIN2at6TensorESaIS3_EERKNS_"
	     "16AllreduceOptionsE",
	     "ProcessGroupGloo::allreduce"),
	GLOO(GLOO_CALL, BROADCAST, 3,
	     "_ZN4c10d16ProcessGroupGloo9broadcastERSt6vectorIN2at6TensorESaIS3_EERKNS_"
	     "16BroadcastOptionsE",
	     "ProcessGroupGloo::broadcast"),
	GLOO(GLOO_CALL, ALLGATHER, 4,
	     "_ZN4c10d16ProcessGroupGloo9allgatherERSt6vectorIS1_IN2at6TensorESaIS3_EESaIS5_"
	     "EERS5_RKNS_16AllgatherOptionsE",
	     "ProcessGroupGloo::allgather"),
	GLOO(GLOO_CALL, BARRIER, 0, "_ZN4c10d16ProcessGroupGloo7barrierERKNS_14BarrierOptionsE",
	     "ProcessGroupGloo::barrier"),
	GLOO(GLOO_CALL, REDUCE, 3,
	     "_ZN4c10d16ProcessGroupGloo6reduceERSt6vectorIN2at6TensorESaIS3_EERKNS_"
	     "13ReduceOptionsE",
	     "ProcessGroupGloo::reduce"),
	GLOO(GLOO_CALL, GATHER, 4,
	     "_ZN4c10d16ProcessGroupGloo6gatherERSt6vectorIS1_IN2at6TensorESaIS3_EESaIS5_EERS5_"
	     "RKNS_13GatherOptionsE",
	     "ProcessGroupGloo::gather"),
	GLOO(GLOO_CALL, SCATTER, 3,
	     "_ZN4c10d16ProcessGroupGloo7scatterERSt6vectorIN2at6TensorESaIS3_EERS1_IS5_SaIS5_"
	     "EERKNS_14ScatterOptionsE",
	     "ProcessGroupGloo::scatter"),
	GLOO(GLOO_CALL, REDUCE_SCATTER, 3,
	     "_ZN4c10d16ProcessGroupGloo14reduce_scatterERSt6vectorIN2at6TensorESaIS3_EERS1_IS5_"
	     "SaIS5_EERKNS_20ReduceScatterOptionsE",
	     "ProcessGroupGloo::reduce_scatter"),
	GLOO(GLOO_CALL, ALLTOALL, 4 | COMM_ARG_TENSOR,
	     "_ZN4c10d16ProcessGroupGloo13alltoall_baseERN2at6TensorES3_RSt6vectorIlSaIlEES7_"
	     "RKNS_15AllToAllOptionsE",
	     "ProcessGroupGloo::alltoall_base"),
	GLOO(GLOO_CALL, ALLREDUCE_COALESCED, 3,
	     "_ZN4c10d16ProcessGroupGloo19allreduce_coalescedERSt6vectorIN2at6TensorESaIS3_"
	     "EERKNS_25AllreduceCoalescedOptionsE",
	     "ProcessGroupGloo::allreduce_coalesced"),
	GLOO(GLOO_CALL, ALLGATHER_COALESCED, 4,
	     "_ZN4c10d16ProcessGroupGloo19allgather_coalescedERSt6vectorIS1_IN2at6TensorESaIS3_"
	     "EESaIS5_EERS5_RKNS_16AllgatherOptionsE",
	     "ProcessGroupGloo::allgather_coalesced"),
	GLOO(GLOO_CALL, ALLGATHER_BASE, 4 | COMM_ARG_TENSOR,
	     "_ZN4c10d16ProcessGroupGloo15_allgather_baseERN2at6TensorES3_RKNS_"
	     "16AllgatherOptionsE",
	     "ProcessGroupGloo::_allgather_base"),
	/* torch 2.x's names of the single-tensor collectives (Backend.hpp: "named after the
	 * torchcomms backend naming scheme"; _allgather_base and alltoall_base forward to them). */
	GLOO(GLOO_CALL, ALLGATHER_BASE, 4 | COMM_ARG_TENSOR,
	     "_ZN4c10d16ProcessGroupGloo17all_gather_singleERN2at6TensorES3_RKNS_"
	     "16AllgatherOptionsE",
	     "ProcessGroupGloo::all_gather_single"),
	GLOO(GLOO_CALL, REDUCE_SCATTER, 3 | COMM_ARG_TENSOR,
	     "_ZN4c10d16ProcessGroupGloo21reduce_scatter_singleERN2at6TensorES3_RKNS_"
	     "20ReduceScatterOptionsE",
	     "ProcessGroupGloo::reduce_scatter_single"),
	GLOO(GLOO_CALL, ALLTOALL, 4 | COMM_ARG_TENSOR,
	     "_ZN4c10d16ProcessGroupGloo17all_to_all_singleERN2at6TensorES3_RSt6vectorIlSaIlEES7_"
	     "RKNS_15AllToAllOptionsE",
	     "ProcessGroupGloo::all_to_all_single"),
	GLOO(GLOO_P2P, SEND, 3, "_ZN4c10d16ProcessGroupGloo4sendERSt6vectorIN2at6TensorESaIS3_EEii",
	     "ProcessGroupGloo::send"),
	GLOO(GLOO_P2P, RECV, 3, "_ZN4c10d16ProcessGroupGloo4recvERSt6vectorIN2at6TensorESaIS3_EEii",
	     "ProcessGroupGloo::recv"),
	GLOO(GLOO_P2P, RECV_ANYSOURCE, 3,
	     "_ZN4c10d16ProcessGroupGloo13recvAnysourceERSt6vectorIN2at6TensorESaIS3_EEi",
	     "ProcessGroupGloo::recvAnysource"),
	GLOO(GLOO_ENQUEUE, ALLREDUCE, 0,
	     "_ZN4c10d16ProcessGroupGloo7enqueueEN3c1013intrusive_ptrINS0_9AsyncWorkENS1_6detail"
	     "34intrusive_target_default_null_typeIS3_EEEE",
	     "ProcessGroupGloo::enqueue"),
	GLOO(GLOO_FINISH, ALLREDUCE, 0, "_ZN4c10d16ProcessGroupGloo9AsyncWork14finishWorkGlooEv",
	     "ProcessGroupGloo::AsyncWork::finishWorkGloo"),
	GLOO(GLOO_ERROR, ALLREDUCE, 0,
	     "_ZN4c10d16ProcessGroupGloo9AsyncWork19finishWorkGlooErrorENSt15__exception_ptr13"
	     "exception_ptrE",
	     "ProcessGroupGloo::AsyncWork::finishWorkGlooError"),
	GLOO(GLOO_ERROR, ALLREDUCE, 0,
	     "_ZN4c10d16ProcessGroupGloo9AsyncWork19finishWorkGlooErrorERKNSt15__exception_ptr13"
	     "exception_ptrE",
	     "ProcessGroupGloo::AsyncWork::finishWorkGlooError(const&)"),
	/* The buffer of a send or recv call, as the call hands it to its work object (torch 1.13,
	 * 2.x): not the buffers' own send/recv, which gloo's algorithms call as well (a trap
	 * each, ~1.6 us: docs/sql.md, "Cost"). Then gloo's TCP transport (libgloo, or built into
	 * libtorch_cpu): the buffers' completion. */
	GLOO(P2P_WORK, SEND, 0,
	     "_ZN4c10d16ProcessGroupGloo8SendWorkC1ERN2at6TensorESt10unique_ptrIN4gloo9transport13"
	     "UnboundBufferESt14default_deleteIS8_EE",
	     "ProcessGroupGloo::SendWork::SendWork"),
	GLOO(P2P_WORK, SEND, 0,
	     "_ZN4c10d16ProcessGroupGloo8SendWorkC1ERN2at6TensorESt10unique_ptrIN4gloo9transport13"
	     "UnboundBufferESt14default_deleteIS8_EEm",
	     "ProcessGroupGloo::SendWork::SendWork(seq)"),
	GLOO(P2P_WORK, RECV, 0,
	     "_ZN4c10d16ProcessGroupGloo8RecvWorkC1ERN2at6TensorESt10unique_ptrIN4gloo9transport13"
	     "UnboundBufferESt14default_deleteIS8_EEPKc",
	     "ProcessGroupGloo::RecvWork::RecvWork"),
	GLOO(P2P_WORK, RECV, 0,
	     "_ZN4c10d16ProcessGroupGloo8RecvWorkC1ERN2at6TensorESt10unique_ptrIN4gloo9transport13"
	     "UnboundBufferESt14default_deleteIS8_EENS_6OpTypeEmPKc",
	     "ProcessGroupGloo::RecvWork::RecvWork(opType, seq)"),
	GLOO(UB_DONE, SEND, 0, "_ZN4gloo9transport3tcp13UnboundBuffer20handleSendCompletionEi",
	     "gloo::transport::tcp::UnboundBuffer::handleSendCompletion"),
	GLOO(UB_DONE, RECV, 0, "_ZN4gloo9transport3tcp13UnboundBuffer20handleRecvCompletionEi",
	     "gloo::transport::tcp::UnboundBuffer::handleRecvCompletion"),
	/* NCCL's C API (nccl.h). */
	NCCL(NCCL_CALL, COMM_OP_ALLREDUCE, COMM_NCCL_COLL, "ncclAllReduce"),
	NCCL(NCCL_CALL, COMM_OP_BROADCAST, COMM_NCCL_BROADCAST, "ncclBroadcast"),
	NCCL(NCCL_CALL, COMM_OP_BROADCAST, COMM_NCCL_BCAST, "ncclBcast"),
	NCCL(NCCL_CALL, COMM_OP_REDUCE, COMM_NCCL_REDUCE, "ncclReduce"),
	NCCL(NCCL_CALL, COMM_OP_ALLGATHER, COMM_NCCL_ALLGATHER, "ncclAllGather"),
	NCCL(NCCL_CALL, COMM_OP_REDUCE_SCATTER, COMM_NCCL_COLL, "ncclReduceScatter"),
	NCCL(NCCL_CALL, COMM_OP_SEND, COMM_NCCL_P2P, "ncclSend"),
	NCCL(NCCL_CALL, COMM_OP_RECV, COMM_NCCL_P2P, "ncclRecv"),
	NCCL(NCCL_GROUP_START, 0, 0, "ncclGroupStart"),
	NCCL(NCCL_GROUP_END, 0, 0, "ncclGroupEnd"),
};

#define NEXT_TAG "_ZN4c10d16ProcessGroupGloo7nextTagEv"
#define NSPECS	 ARRAY_SIZE(specs)

/* A probe point of a library file. */
struct point {
	uint64_t offset; /* in the file */
	uint64_t cookie;
};

/* A library file, once per build-id. Its slot in comm_libs is its index. */
struct lib {
	char build_id[41];
	char name[64];
	struct comm_lib_cfg cfg;
	struct point points[NSPECS];
	size_t npoints;
	int layout; /* the tensor layout: 0 not checked yet, 1 good, -1 unusable */
	const struct torchlayout *tl; /* torch's layout: by the file name, or confirmed */
	int group; /* tl's group fields: 0 not confirmed yet, 1 good, -1 unusable */
};

/* The file of a mapping, as the kernel knows it. */
struct file_key {
	uint64_t ino;
	uint32_t dev_major, dev_minor;
};

/* Some probe points of a library in a process, attached. */
struct probe_set {
	int link_fd;		 /* uprobe_multi: one link for every point; -1: none */
	struct bpf_link **links; /* perf-event uprobes: one link per point */
	size_t nlinks;
};

/*
 * The probes of one library file in one process: its calls' (core) and gloo's buffer
 * completions (ub). The latter are there for send/recv, but fire inside every collective's
 * algorithm as well (a trap each, ~20 a collective at 8 ranks): they are detached from a
 * process that completed COMM_UB_IDLE_WORKS collectives with no send/recv, and attached again
 * at its next send/recv call, whose completion (and that of any send/recv issued before they
 * were back) is then not known.
 */
struct attachment {
	pid_t pid;
	struct file_key file;
	unsigned int lib;
	struct probe_set core, ub;
	int file_fd;	  /* the library, to attach ub again; -1: no ub points */
	uint64_t ub_mono; /* when ub was last attached, CLOCK_MONOTONIC and CLOCK_TAI */
	uint64_t ub_tai;
	uint64_t idle_works; /* collectives completed in the process since ub was attached or its
			      * last send/recv call */
	uint64_t made_ns;    /* when the maps it was made of were read (CLOCK_MONOTONIC) */
};

/* Collectives a process completes with no send/recv before its buffer-completion probes are
 * detached: about 5 s of a DDP job at 8 ranks, 37 steps a second, and a step or a few of an
 * FSDP job's (2,000 before: a minute of traps at ~12 a collective, for the one send/recv a
 * job that sends rarely has without its completion at each return of the probes). */
#define COMM_UB_IDLE_WORKS 200

/* What a process's executable mappings added up to at its last scan (status VmExe + VmLib:
 * the kernel's exec_vm, which a library mapped with PROT_EXEC grows). */
struct exec_size {
	pid_t pid;
	unsigned long long kib;
	uint64_t scan_ns; /* when (0: not scanned since its exec) */
};

/* A process whose executable mappings did not change is scanned again after this anyway (a
 * library unmapped and another of the same size mapped in between). */
#define COMM_FULL_SCAN_NS (60ULL * 1000000000ULL)

/* A scan comm__mapped asked for. */
struct rescan {
	pid_t pid;
	uint64_t due_ns;
	uint64_t every_ns; /* between the scans after the first */
	int left;
};

struct comm {
	struct comm_bpf *skel;
	struct bpf_link *mmap_link; /* comm_mmap; NULL: not available */
	bool multi;		    /* uprobe_multi links */
	struct lib *libs;
	size_t nlibs, caplibs;
	struct bmap *by_file;	  /* struct file_key -> lib index + 1 */
	struct bmap *by_build_id; /* build id -> lib index + 1 */
	struct attachment *att;
	size_t natt, capatt;
	struct rescan *rescans;
	size_t nrescans, caprescans;
	struct exec_size *sizes; /* of the processes scanned, without an mmap hook */
	size_t nsizes, capsizes;
	struct strbuf notes;
	uint64_t points;    /* probe points attached, over all processes */
	uint64_t processes; /* processes that had probes attached (also those gone since) */
	uint64_t ub_detached, ub_attached_again; /* buffer-completion probes (struct attachment) */
	uint64_t p2p_unwatched; /* send/recv calls issued while they were not attached */
};

static void note(struct comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Say @fmt at -v and keep it for meta.comm_notes (each note once). */
static void note(struct comm *c, const char *fmt, ...)
{
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (c->notes.len && strstr(sb_str(&c->notes), text))
		return;
	pr_info("collectives: %s", text);
	sb_printf(&c->notes, "%s%s", c->notes.len ? "; " : "", text);
}

/* Kernels from 6.6 have uprobe_multi links; older ones reject the attach type at load. */
static bool kernel_has_uprobe_multi(void)
{
	struct utsname u;
	int major = 0, minor = 0;

	if (uname(&u) || sscanf(u.release, "%d.%d", &major, &minor) != 2)
		return false;
	return major > 6 || (major == 6 && minor >= 6);
}

/* How comm learns that a target maps a library (COMM_EV_MAPPED), in the order tried: fentry on
 * security_mmap_file (needs BPF trampolines, nothing mounted), a kprobe on it (the kprobe PMU,
 * nothing mounted either: for kernels built without trampolines), the mmap system call's
 * tracepoint (its attach needs tracefs, which a fresh machine may not have mounted), none
 * (the targets are scanned once a second: a library's first calls can be missed).
 * A hook counts only once it is attached: the next one is tried if its load or its attach
 * fails. */
enum mmap_hook { HOOK_FENTRY, HOOK_KPROBE, HOOK_TRACEPOINT, HOOK_NONE };

static const char *const mmap_hook_names[] = {"fentry", "kprobe", "tracepoint", "none"};

/* The program of hook @h in @skel (NULL for HOOK_NONE). */
static struct bpf_program *mmap_hook_prog(struct comm_bpf *skel, enum mmap_hook h)
{
	switch (h) {
	case HOOK_FENTRY:
		return skel->progs.comm_mmap;
	case HOOK_KPROBE:
		return skel->progs.comm_mmap_kp;
	case HOOK_TRACEPOINT:
		return skel->progs.comm_mmap_tp;
	default:
		return NULL;
	}
}

static int load(struct comm *c, struct sampling *s, const struct comm_opts *o, enum mmap_hook h)
{
	struct comm_bpf *skel;
	int err;

	skel = comm_bpf__open();
	if (!skel)
		return -errno;
	skel->rodata->stack_size = o->stack_size & ~7u;
	skel->rodata->want_python = o->python;
	skel->rodata->pidns_inum = o->pidns_inum;
	skel->rodata->use_tai =
		libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_ktime_get_tai_ns, NULL) > 0;
	err = sampling__share_maps(s, skel->obj);
	if (err)
		goto fail;
	if (c->multi)
		bpf_program__set_expected_attach_type(skel->progs.comm_probe, ATTACH_UPROBE_MULTI);
	bpf_program__set_autoload(skel->progs.comm_mmap, h == HOOK_FENTRY);
	bpf_program__set_autoload(skel->progs.comm_mmap_kp, h == HOOK_KPROBE);
	bpf_program__set_autoload(skel->progs.comm_mmap_tp, h == HOOK_TRACEPOINT);
	err = comm_bpf__load(skel);
	if (err)
		goto fail;
	c->skel = skel;
	return 0;
fail:
	comm_bpf__destroy(skel);
	return err;
}

/* Attach the mmap hook that was loaded for @h: 0, or a negative errno (-ENOENT: tracefs is not
 * mounted, for the tracepoint). */
static int attach_mmap_hook(struct comm *c, enum mmap_hook h)
{
	c->mmap_link = bpf_program__attach(mmap_hook_prog(c->skel, h));
	return c->mmap_link ? 0 : -errno;
}

bool comm__is_nccl_call(const char *func)
{
	size_t i;

	if (strncmp(func, "nccl", 4))
		return false;
	for (i = 0; i < ARRAY_SIZE(specs); i++)
		if (specs[i].role == COMM_R_NCCL_CALL && !strcmp(specs[i].sym, func))
			return true;
	return false;
}

int comm__open(struct sampling *s, const struct comm_opts *o, struct comm **out)
{
	struct comm *c;
	enum mmap_hook h;
	int err = -EINVAL;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->by_file = bmap__new();
	c->by_build_id = bmap__new();
	if (!c->by_file || !c->by_build_id) {
		err = -ENOMEM;
		goto fail;
	}
	c->multi = kernel_has_uprobe_multi();
	/* Without an mmap hook the targets' libraries are found by scanning. libbpf's own
	 * messages about what a kernel lacks are for -vv. */
	log_libbpf_quiet(true);
	for (h = HOOK_FENTRY; h <= HOOK_NONE && err; h++) {
		err = load(c, s, o, h);
		if (err && h != HOOK_NONE)
			pr_debug("collectives: the %s mmap hook did not load (%s)",
				 mmap_hook_names[h], strerror(-err));
		if (err || h == HOOK_NONE)
			continue;
		err = attach_mmap_hook(c, h);
		if (err) {
			pr_debug("collectives: the %s mmap hook did not attach (%s)",
				 mmap_hook_names[h], strerror(-err));
			comm_bpf__destroy(c->skel);
			c->skel = NULL;
		}
	}
	if (err && c->multi) {
		c->multi = false;
		err = load(c, s, o, HOOK_NONE);
	}
	log_libbpf_quiet(false);
	if (err) {
		pr_info("collectives are not recorded: the kernel refused their BPF program (%s; "
			"-vv shows the verifier's log)",
			strerror(-err));
		goto fail;
	}
	if (!c->mmap_link)
		pr_debug("collectives: no mmap hook: targets are scanned once a second");
	else
		pr_debug("collectives: libraries mapped are seen by the %s mmap hook",
			 mmap_hook_names[h - 1]);
	*out = c;
	return 0;
fail:
	comm__free(c);
	return err;
}

static void detach_set(struct probe_set *ps)
{
	size_t i;

	if (ps->link_fd >= 0)
		close(ps->link_fd);
	for (i = 0; i < ps->nlinks; i++)
		bpf_link__destroy(ps->links[i]);
	free(ps->links);
	ps->link_fd = -1;
	ps->links = NULL;
	ps->nlinks = 0;
}

/* Whether @ps has probes attached. */
static bool set_attached(const struct probe_set *ps)
{
	return ps->link_fd >= 0 || ps->nlinks;
}

static void detach(struct attachment *a)
{
	detach_set(&a->core);
	detach_set(&a->ub);
	if (a->file_fd >= 0)
		close(a->file_fd);
	a->file_fd = -1;
}

void comm__free(struct comm *c)
{
	size_t i;

	if (!c)
		return;
	for (i = 0; i < c->natt; i++)
		detach(&c->att[i]);
	free(c->att);
	bpf_link__destroy(c->mmap_link);
	comm_bpf__destroy(c->skel);
	bmap__free(c->by_file);
	bmap__free(c->by_build_id);
	free(c->libs);
	free(c->rescans);
	free(c->sizes);
	sb_free(&c->notes);
	free(c);
}

bool comm__watches_mmap(const struct comm *c)
{
	return c->mmap_link != NULL;
}

/* The file names of libraries that may have probe points (comm.bpf.c: maybe_probed). */
static bool maybe_probed(const char *base)
{
	return !strncmp(base, "libtorch", 8) || !strncmp(base, "libnccl", 7) ||
	       !strncmp(base, "libgloo", 7);
}

/* The first instruction of a probe point: endbr64 is stepped over (the probe goes after it);
 * a push is emulated by the kernel, anything else single-stepped (about 20 times dearer). */
static void place_probe(struct lib *l, struct pyelf *e, uint64_t addr, const char *what,
			uint64_t *offset)
{
	static const uint8_t endbr64[] = {0xf3, 0x0f, 0x1e, 0xfa};
	uint8_t code[8];

	if (pyelf__read(e, addr, code, sizeof(code)))
		return;
	if (!memcmp(code, endbr64, 4)) {
		*offset += 4;
		memmove(code, code + 4, 4);
	}
	if (code[0] != 0x55 && code[0] != 0x53 &&
	    !(code[0] == 0x41 && code[1] >= 0x54 && code[1] <= 0x57))
		pr_debug("collectives: %s in %s starts with %02x %02x, not a push: its probe is "
			 "single-stepped",
			 what, l->name, code[0], code[1]);
}

/* Find the probe points of the library @e (named @name, build id @bid) into @l. */
static void resolve(struct comm *c, struct lib *l, struct pyelf *e, unsigned int slot)
{
	const char *names[NSPECS + 1];
	uint64_t values[NSPECS + 1] = {}, off;
	const struct torchlayout *tl;
	uint8_t code[32];
	bool gloo = false, gloo_done = false, nccl = false;
	size_t i;

	for (i = 0; i < NSPECS; i++)
		names[i] = specs[i].sym;
	names[NSPECS] = NEXT_TAG;
	if (pyelf__symbols(e, names, NSPECS + 1, false, values, NULL) < 0)
		return;
	/* The torch version the file name says (Debian's libtorch_cpu.so.2.14.1), else the
	 * newest known layout until the first call confirms one (comm__call_group); the
	 * tensors' layout is checked on the first call either way (check_layout). */
	l->tl = torchlayout_by_name(l->name);
	l->group = l->tl ? 1 : 0;
	tl = l->tl;
	for (i = 0; !tl; i++)
		if (!torchlayout_known(i + 1))
			tl = torchlayout_known(i);
	l->cfg = (struct comm_lib_cfg){
		.pg_rank = tl->pg_rank,
		.pg_size = tl->pg_size,
		.pg_counter = COMM_OFF_NONE,
		.ti_numel = tl->ti_numel,
		.ti_dtype = tl->ti_numel + 8,
		.flags = COMM_LIB_HDR,
	};
	for (i = 0; i < NSPECS; i++) {
		if (!values[i] || pyelf__file_offset(e, values[i], &off))
			continue;
		place_probe(l, e, values[i], specs[i].what, &off);
		l->points[l->npoints].offset = off;
		l->points[l->npoints].cookie =
			COMM_COOKIE(specs[i].role, specs[i].op, specs[i].arg, slot);
		l->npoints++;
		gloo |= specs[i].role == COMM_R_GLOO_CALL;
		gloo_done |= specs[i].role == COMM_R_GLOO_FINISH;
		nccl |= specs[i].role == COMM_R_NCCL_CALL;
	}
	if (gloo && values[NSPECS] && !pyelf__read(e, values[NSPECS], code, sizeof(code)) &&
	    torchlayout_next_tag(code, sizeof(code), &l->cfg.pg_counter))
		note(c,
		     "%s (build-id %s): ProcessGroupGloo::nextTag is not of a known form: seq "
		     "is unknown",
		     l->name, l->build_id);
	if (gloo && !values[NSPECS])
		note(c, "%s (build-id %s): no ProcessGroupGloo::nextTag: seq is unknown", l->name,
		     l->build_id);
	if (gloo && !gloo_done)
		note(c,
		     "%s (build-id %s): no ProcessGroupGloo::AsyncWork::finishWorkGloo: the "
		     "completion of gloo collectives is unknown",
		     l->name, l->build_id);
	if (!gloo && !strncmp(l->name, "libtorch_cpu", 12))
		note(c,
		     "%s (build-id %s): no c10d::ProcessGroupGloo symbols in its dynamic symbol "
		     "table: its gloo collectives are not recorded",
		     l->name, l->build_id);
	if (!nccl && !strncmp(l->name, "libnccl", 7))
		note(c,
		     "%s (build-id %s): no NCCL API symbols in its dynamic symbol table: its "
		     "collectives are not recorded",
		     l->name, l->build_id);
	if (nccl)
		note(c, "nccl: the completion of NCCL calls on the GPU is not observed (ns is "
			"NULL; start_ns is when the CPU issued them), nor their seq");
	pr_debug("collectives: %s (build-id %s): %zu probe points", l->name, l->build_id,
		 l->npoints);
}

/* The library behind mapping @m of @pid: known by its file or its build id, or read now.
 * NULL if its file cannot be read. */
static struct lib *get_lib(struct comm *c, pid_t pid, const struct procmap *m,
			   const struct file_key *fk)
{
	uint64_t *slot = bmap__find(c->by_file, fk, sizeof(*fk));
	char bid[41] = "";
	struct pyelf *e;
	struct lib *l = NULL;
	size_t idx;
	int inserted;

	if (slot)
		return &c->libs[*slot - 1];
	e = pyelf__open(pid, m);
	if (!e) {
		pr_debug("collectives: pid %d: cannot read %s: %s", pid, m->path, strerror(errno));
		return NULL;
	}
	if (pyelf__build_id(e, bid, sizeof(bid)))
		snprintf(bid, sizeof(bid), "none");
	slot = strcmp(bid, "none") ? bmap__find(c->by_build_id, bid, strlen(bid)) : NULL;
	if (slot) {
		idx = *slot - 1;
	} else {
		if (c->nlibs >= COMM_MAX_LIBS ||
		    grow_array(&c->libs, &c->caplibs, c->nlibs + 1, sizeof(*c->libs)))
			goto cleanup;
		idx = c->nlibs++;
		l = &c->libs[idx];
		memset(l, 0, sizeof(*l));
		snprintf(l->build_id, sizeof(l->build_id), "%s", bid);
		snprintf(l->name, sizeof(l->name), "%s", procmaps__basename(m));
		resolve(c, l, e, idx);
		if (bpf_map__update_elem(c->skel->maps.comm_libs, &(__u32){idx}, sizeof(__u32),
					 &l->cfg, sizeof(l->cfg), BPF_ANY))
			l->npoints = 0;
		if (strcmp(bid, "none")) {
			slot = bmap__upsert(c->by_build_id, bid, strlen(bid), 0, &inserted);
			if (slot)
				*slot = idx + 1;
		}
	}
	slot = bmap__upsert(c->by_file, fk, sizeof(*fk), 0, &inserted);
	if (slot)
		*slot = idx + 1;
	l = &c->libs[idx];
cleanup:
	pyelf__free(e);
	return l;
}

/* Whether @p is one of gloo's buffer completions (struct attachment: ub). */
static bool is_ub(const struct point *p)
{
	return COMM_COOKIE_ROLE(p->cookie) == COMM_R_UB_DONE;
}

/* One uprobe_multi link for the points of @l in @pid that are buffer completions (@ub) or
 * not. The fd of the link, or -errno (-ENOENT: no such point). */
static int attach_multi(struct comm *c, const struct lib *l, const char *path, pid_t pid, bool ub)
{
	unsigned long offsets[NSPECS];
	__u64 cookies[NSPECS];
	size_t n = 0;
	union {
		struct {
			__u32 prog_fd, target_fd, attach_type, flags;
			__u64 path, offsets, ref_ctr_offsets, cookies;
			__u32 cnt, flags2, pid;
		} uprobe_multi;
		char pad[128];
	} attr;
	size_t i;
	int fd;

	for (i = 0; i < l->npoints; i++) {
		if (is_ub(&l->points[i]) != ub)
			continue;
		offsets[n] = l->points[i].offset;
		cookies[n++] = l->points[i].cookie;
	}
	if (!n)
		return -ENOENT;
	memset(&attr, 0, sizeof(attr));
	attr.uprobe_multi.prog_fd = bpf_program__fd(c->skel->progs.comm_probe);
	attr.uprobe_multi.attach_type = ATTACH_UPROBE_MULTI;
	attr.uprobe_multi.path = (uintptr_t)path;
	attr.uprobe_multi.offsets = (uintptr_t)offsets;
	attr.uprobe_multi.cookies = (uintptr_t)cookies;
	attr.uprobe_multi.cnt = n;
	attr.uprobe_multi.pid = pid;
	fd = syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr));
	return fd < 0 ? -errno : fd;
}

/* One perf-event uprobe per point of @l in @pid that is a buffer completion (@ub) or not,
 * into @ps. 0 or -errno (none left attached). */
static int attach_each(struct comm *c, const struct lib *l, const char *path, pid_t pid, bool ub,
		       struct probe_set *ps)
{
	size_t i;
	int err = 0;

	ps->links = calloc(l->npoints, sizeof(*ps->links));
	if (!ps->links)
		return -ENOMEM;
	for (i = 0; i < l->npoints; i++) {
		LIBBPF_OPTS(bpf_uprobe_opts, uo, .bpf_cookie = l->points[i].cookie);

		if (is_ub(&l->points[i]) != ub)
			continue;
		ps->links[ps->nlinks] = bpf_program__attach_uprobe_opts(
			c->skel->progs.comm_probe, pid, path, l->points[i].offset, &uo);
		if (!ps->links[ps->nlinks]) {
			err = -errno;
			detach_set(ps);
			return err;
		}
		ps->nlinks++;
	}
	return 0;
}

/* Attach @l's points in @pid that are buffer completions (@ub) or not into @ps, from the file
 * @path. 0 (also when there is no such point) or -errno. */
static int attach_set(struct comm *c, const struct lib *l, const char *path, pid_t pid, bool ub,
		      struct probe_set *ps)
{
	if (c->multi) {
		ps->link_fd = attach_multi(c, l, path, pid, ub);
		return ps->link_fd == -ENOENT ? 0 : ps->link_fd < 0 ? ps->link_fd : 0;
	}
	return attach_each(c, l, path, pid, ub, ps);
}

/* Whether @l has buffer-completion points. */
static bool has_ub(const struct lib *l)
{
	size_t i;

	for (i = 0; i < l->npoints; i++)
		if (is_ub(&l->points[i]))
			return true;
	return false;
}

/* @a's buffer-completion probes attached (again): 0 or -errno. */
static int attach_ub(struct comm *c, struct attachment *a)
{
	const struct lib *l = &c->libs[a->lib];
	struct timespec mono, tai;
	char path[64];
	int err;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", a->file_fd);
	err = attach_set(c, l, path, a->pid, true, &a->ub);
	if (err)
		return err;
	clock_gettime(CLOCK_MONOTONIC, &mono);
	clock_gettime(CLOCK_TAI, &tai);
	a->ub_mono = mono.tv_sec * 1000000000ULL + mono.tv_nsec;
	a->ub_tai = tai.tv_sec * 1000000000ULL + tai.tv_nsec;
	a->idle_works = 0;
	return 0;
}

static struct attachment *find_attachment(struct comm *c, pid_t pid, const struct file_key *fk)
{
	size_t i;

	for (i = 0; i < c->natt; i++)
		if (c->att[i].pid == pid && !memcmp(&c->att[i].file, fk, sizeof(*fk)))
			return &c->att[i];
	return NULL;
}

/* Whether @pid has probes attached other than @except. */
static bool probed(const struct comm *c, pid_t pid, const struct attachment *except)
{
	size_t i;

	for (i = 0; i < c->natt; i++)
		if (&c->att[i] != except && c->att[i].pid == pid && set_attached(&c->att[i].core))
			return true;
	return false;
}

/* Probe the library of mapping @m in @pid, seen in its maps read at @looked_ns. 1 if probes
 * were attached, 0 if it has none, or -errno. */
static int probe_mapping(struct comm *c, pid_t pid, const struct procmap *m,
			 const struct file_key *fk, uint64_t looked_ns)
{
	struct attachment *a;
	struct lib *l;
	char path[64];
	int fd, err = 0;

	l = get_lib(c, pid, m, fk);
	if (!l)
		return -ENOENT;
	if (grow_array(&c->att, &c->capatt, c->natt + 1, sizeof(*c->att)))
		return -ENOMEM;
	a = &c->att[c->natt++]; /* also for a library without points: looked at once */
	memset(a, 0, sizeof(*a));
	a->pid = pid;
	a->file = *fk;
	a->lib = l - c->libs;
	a->core.link_fd = -1;
	a->ub.link_fd = -1;
	a->file_fd = -1;
	/* When the maps were read, not now: a child forked by a launcher that imported torch
	 * maps libtorch until it execs; an attachment made of maps read before the exec is
	 * the old program's, and comm__exec must drop it, or the new program's libtorch (the
	 * same file) would count as probed and never be. */
	a->made_ns = looked_ns;
	if (!l->npoints)
		return 0;
	/* The file the process maps (procmaps__open checks device and inode), named for the
	 * kernel through our own descriptor. */
	fd = procmaps__open(pid, m);
	if (fd < 0) {
		/* No longer the file @pid maps (it exec'd or unmapped it since its maps were
		 * read): nothing attached, nothing looked at; a later scan tries again. */
		c->natt--;
		return fd;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	err = attach_set(c, l, path, pid, false, &a->core);
	if (!err && has_ub(l)) {
		a->file_fd = fd; /* kept, to attach them again after detaching them */
		fd = -1;
		err = attach_ub(c, a);
	}
	if (fd >= 0)
		close(fd);
	if (err) {
		detach(a);
		note(c, "pid %d: cannot attach the probes of %s: %s", pid, l->name, strerror(-err));
		return err;
	}
	if (!probed(c, pid, a))
		c->processes++;
	c->points += l->npoints;
	pr_info("pid %d: collectives: %zu probe points in %s", pid, l->npoints, m->path);
	return 1;
}

/* The size of @pid's executable mappings (KiB), or -errno. */
static long long exec_kib(pid_t pid)
{
	static const char *const keys[] = {"VmExe", "VmLib"};
	unsigned long long kib[2];
	int err = procinfo_status_numbers(pid, 0, keys, 2, 10, kib);

	return err ?: (long long)(kib[0] + kib[1]);
}

/* @pid's entry in c->sizes (a new one, zeroed, if it has none), or NULL (no memory). */
static struct exec_size *size_of(struct comm *c, pid_t pid)
{
	size_t i;

	for (i = 0; i < c->nsizes; i++)
		if (c->sizes[i].pid == pid)
			return &c->sizes[i];
	if (grow_array(&c->sizes, &c->capsizes, c->nsizes + 1, sizeof(*c->sizes)))
		return NULL;
	c->sizes[c->nsizes] = (struct exec_size){.pid = pid};
	return &c->sizes[c->nsizes++];
}

static void forget_size(struct comm *c, pid_t pid)
{
	size_t i;

	for (i = 0; i < c->nsizes; i++)
		if (c->sizes[i].pid == pid) {
			c->sizes[i] = c->sizes[--c->nsizes];
			return;
		}
}

/* comm__scan, where @pid's executable mappings measured @kib KiB just before (-1: unknown). */
static int scan(struct comm *c, pid_t pid, long long kib)
{
	const struct procmap *m;
	struct file_key fk;
	struct procmaps pm;
	struct exec_size *sz;
	size_t i;
	uint64_t looked_ns = now_mono_ns();
	int err, n = 0;

	/* The size before the maps: a library mapped after it is seen by the next look. */
	if (kib >= 0 && (sz = size_of(c, pid))) {
		sz->kib = (unsigned long long)kib;
		sz->scan_ns = looked_ns;
	}
	err = procmaps__read(pid, &pm);
	if (err)
		return err;
	for (i = 0; i < pm.nr; i++) {
		m = &pm.maps[i];
		if (!m->x || m->path[0] != '/' || m->deleted ||
		    !maybe_probed(procmaps__basename(m)))
			continue;
		fk = (struct file_key){m->inode, m->dev_major, m->dev_minor};
		if (find_attachment(c, pid, &fk))
			continue;
		if (probe_mapping(c, pid, m, &fk, looked_ns) > 0)
			n++;
	}
	procmaps__release(&pm);
	return n;
}

int comm__scan(struct comm *c, pid_t pid)
{
	return scan(c, pid, c->mmap_link ? -1 : exec_kib(pid));
}

/* Scan @pid again @first_ns from now, then every @every_ns, @times scans in all (replacing
 * what was planned for it with the same interval: an exec starts its count again). */
static void rescan_later(struct comm *c, pid_t pid, uint64_t first_ns, uint64_t every_ns, int times)
{
	struct rescan *r = NULL;
	size_t i;

	for (i = 0; i < c->nrescans && !r; i++)
		if (c->rescans[i].pid == pid && c->rescans[i].every_ns == every_ns)
			r = &c->rescans[i];
	if (!r) {
		if (grow_array(&c->rescans, &c->caprescans, c->nrescans + 1, sizeof(*c->rescans)))
			return;
		r = &c->rescans[c->nrescans++];
	}
	r->pid = pid;
	r->due_ns = now_mono_ns() + first_ns;
	r->every_ns = every_ns;
	r->left = times;
}

void comm__mapped(struct comm *c, pid_t pid)
{
	pr_debug("collectives: pid %d maps a library that may have probe points", pid);
	comm__scan(c, pid);
	/* The event comes before the mapping exists; it is usually there by the time the
	 * event is handled, but look again shortly in case. */
	rescan_later(c, pid, 20000000ULL, 100000000ULL, 3);
}

void comm__tick(struct comm *c, pid_t pid)
{
	uint64_t now = now_mono_ns();
	struct exec_size *sz;
	long long kib;

	if (c->mmap_link)
		return;
	/* Only when its executable mappings changed since its last scan (a status file, not
	 * the maps: hundreds of lines in a torch process), or long ago. */
	kib = exec_kib(pid);
	sz = size_of(c, pid);
	if (kib >= 0 && sz && sz->scan_ns && (unsigned long long)kib == sz->kib &&
	    now - sz->scan_ns < COMM_FULL_SCAN_NS)
		return;
	scan(c, pid, kib);
}

void comm__started(struct comm *c, pid_t pid)
{
	comm__scan(c, pid);
	if (!c->mmap_link)
		rescan_later(c, pid, 100000000ULL, 100000000ULL, 200);
}

void comm__poll(struct comm *c)
{
	uint64_t now;
	size_t i;

	if (!c->nrescans)
		return;
	now = now_mono_ns();
	for (i = 0; i < c->nrescans;) {
		struct rescan *r = &c->rescans[i];

		if (r->due_ns > now) {
			i++;
			continue;
		}
		if (comm__scan(c, r->pid) >= 0 && --r->left > 0) {
			r->due_ns = now + r->every_ns;
			i++;
			continue;
		}
		*r = c->rescans[--c->nrescans];
	}
}

int comm__site_put(struct comm *c, const struct site_key *k, const struct site_checks *site)
{
	if (bpf_map__update_elem(c->skel->maps.comm_sites, k, sizeof(*k), site, sizeof(*site),
				 BPF_ANY))
		return -errno;
	return 0;
}

/* Detach @pid's probes attached before @before_ns and drop the scans planned for it. */
static void drop_attachments(struct comm *c, pid_t pid, uint64_t before_ns)
{
	size_t i;

	for (i = 0; i < c->natt;) {
		if (c->att[i].pid != pid || c->att[i].made_ns >= before_ns) {
			i++;
			continue;
		}
		detach(&c->att[i]);
		c->att[i] = c->att[--c->natt];
	}
	for (i = 0; i < c->nrescans;) {
		if (c->rescans[i].pid == pid)
			c->rescans[i] = c->rescans[--c->nrescans];
		else
			i++;
	}
}

void comm__forget(struct comm *c, pid_t pid)
{
	site_map__forget(c->skel->maps.comm_sites, pid);
	drop_attachments(c, pid, UINT64_MAX);
	forget_size(c, pid);
}

void comm__exec(struct comm *c, pid_t pid, uint64_t exec_ns)
{
	site_map__forget(c->skel->maps.comm_sites, pid);
	drop_attachments(c, pid, exec_ns);
	forget_size(c, pid);
	comm__started(c, pid);
}

void comm__work_done(struct comm *c, pid_t pid)
{
	struct attachment *a;
	size_t i;

	for (i = 0; i < c->natt; i++) {
		a = &c->att[i];
		if (a->pid != pid || !set_attached(&a->ub) || ++a->idle_works < COMM_UB_IDLE_WORKS)
			continue;
		detach_set(&a->ub);
		c->ub_detached++;
		pr_info("pid %d: collectives: %d completed and no send/recv: gloo's buffer-"
			"completion probes detached until its next send/recv",
			pid, COMM_UB_IDLE_WORKS);
	}
}

void comm__p2p_call(struct comm *c, pid_t pid)
{
	struct attachment *a;
	size_t i;
	int err;

	for (i = 0; i < c->natt; i++) {
		a = &c->att[i];
		if (a->pid != pid || a->file_fd < 0)
			continue;
		a->idle_works = 0;
		if (set_attached(&a->ub))
			continue;
		err = attach_ub(c, a);
		if (err) {
			note(c, "pid %d: cannot attach gloo's buffer-completion probes again: %s",
			     pid, strerror(-err));
			close(a->file_fd); /* not tried again */
			a->file_fd = -1;
			continue;
		}
		c->ub_attached_again++;
		pr_info("pid %d: collectives: a send/recv: gloo's buffer-completion probes "
			"attached again",
			pid);
	}
}

/*
 * Forget the buffers of @pid's send/recv calls that started before @before (the BPF clock):
 * issued while the buffer-completion probes were detached, they may have completed unseen, and
 * their entries would take the completion of a later buffer at the same address.
 */
static void forget_unwatched_bufs(struct comm *c, pid_t pid, uint64_t before)
{
	int fd = bpf_map__fd(c->skel->maps.p2p_bufs);
	struct p2p_buf_key k, next, gone[64];
	size_t n = 0, i;
	__u64 started;
	void *prev = NULL;

	while (n < ARRAY_SIZE(gone) && !bpf_map_get_next_key(fd, prev, &next)) {
		k = next;
		prev = &k;
		if (k.pid == (__u32)pid && !bpf_map_lookup_elem(fd, &k, &started) &&
		    started < before)
			gone[n++] = k;
	}
	for (i = 0; i < n; i++)
		bpf_map_delete_elem(fd, &gone[i]);
}

bool comm__p2p_watched(struct comm *c, pid_t pid, uint64_t since_ns, bool tai)
{
	const struct attachment *a;
	size_t i;

	for (i = 0; i < c->natt; i++) {
		a = &c->att[i];
		if (a->pid != pid || a->file_fd < 0)
			continue;
		if (!set_attached(&a->ub) || since_ns < (tai ? a->ub_tai : a->ub_mono)) {
			c->p2p_unwatched++;
			if (set_attached(&a->ub))
				forget_unwatched_bufs(c, pid, tai ? a->ub_tai : a->ub_mono);
			return false;
		}
	}
	return true;
}

/* The probes of @l's calls stop sending the first tensor's header: its layout is decided. */
static void layout_decided(struct comm *c, struct lib *l, unsigned int slot, int layout)
{
	l->layout = layout;
	l->cfg.flags &= ~COMM_LIB_HDR;
	bpf_map__update_elem(c->skel->maps.comm_libs, &(__u32){slot}, sizeof(__u32), &l->cfg,
			     sizeof(l->cfg), BPF_ANY);
}

/* The layout of @l's tensors, checked on the first tensor of @e that can tell. */
static void check_layout(struct comm *c, struct lib *l, unsigned int slot,
			 const struct comm_call_event *e)
{
	enum torchlayout_check ok;
	uint16_t numel;

	ok = torchlayout_tensor_check(e->tensor0, sizeof(e->tensor0), l->cfg.ti_numel);
	if (ok == TL_GOOD) {
		layout_decided(c, l, slot, 1);
		return;
	}
	if (ok == TL_UNKNOWN)
		return;
	if (torchlayout_tensor_find(e->tensor0, sizeof(e->tensor0), &numel)) {
		layout_decided(c, l, slot, -1);
		note(c,
		     "%s (build-id %s): the tensors do not have a known layout: bytes are "
		     "unknown",
		     l->name, l->build_id);
		return;
	}
	l->cfg.ti_numel = numel;
	l->cfg.ti_dtype = numel + 8;
	layout_decided(c, l, slot, 1);
	note(c, "%s (build-id %s): TensorImpl::numel_ found at offset %u", l->name, l->build_id,
	     numel);
}

int comm__call_bytes(struct comm *c, const struct comm_call_event *e, int64_t *bytes)
{
	unsigned int slot = COMM_COOKIE_LIB(e->h.cookie), size, i;
	uint16_t used = 0, dtype;
	uint64_t n, total = 0;
	struct lib *l;

	if (COMM_COOKIE_ROLE(e->h.cookie) == COMM_R_NCCL_CALL) {
		size = torchlayout_nccl_size(e->dtype);
		if (!size || e->count > (UINT64_MAX >> 8))
			return -ENOENT;
		*bytes = e->count * size;
		return 0;
	}
	if (!(COMM_COOKIE_ARG(e->h.cookie) & COMM_ARG_INDEX)) {
		*bytes = 0; /* barrier */
		return 0;
	}
	if (slot >= c->nlibs || !(e->h.flags & COMM_F_TENSORS) || e->ntensors > COMM_MAX_TENSORS)
		return -ENOENT;
	l = &c->libs[slot];
	used = l->cfg.ti_numel;
	if (!l->layout && (e->h.flags & COMM_F_HDR))
		check_layout(c, l, slot, e);
	if (l->layout <= 0)
		return -ENOENT; /* not checked yet (no header read), or unusable */
	if (used != l->cfg.ti_numel) {
		/* The layout was just found: this call's sizes were read at the wrong place. */
		if (e->ntensors != 1)
			return -ENOENT;
		torchlayout_tensor_read(e->tensor0, l->cfg.ti_numel, &n, &dtype);
		size = torchlayout_item_size(dtype);
		if (!size)
			return -ENOENT;
		*bytes = n * size;
		return 0;
	}
	for (i = 0; i < e->ntensors; i++) {
		size = torchlayout_item_size(e->dtypes[i]);
		if (!size || e->numel[i] > (UINT64_MAX >> 5))
			return -ENOENT;
		total += e->numel[i] * size;
	}
	*bytes = total;
	return 0;
}

int comm__call_group(struct comm *c, const struct comm_call_event *e, int32_t *rank, int32_t *size)
{
	unsigned int slot = COMM_COOKIE_LIB(e->h.cookie);
	const struct torchlayout *tl;
	struct lib *l;

	if (slot >= c->nlibs)
		return -ENOENT;
	l = &c->libs[slot];
	if (!l->group && e->pg) {
		tl = torchlayout_confirm_group(e->h.pid, e->pg, rank, size);
		l->group = tl ? 1 : -1;
		if (!tl) {
			note(c,
			     "%s (build-id %s): its process groups have no known layout: group "
			     "ranks and names are unknown",
			     l->name, l->build_id);
			return -ENOENT;
		}
		l->tl = tl;
		l->cfg.pg_rank = tl->pg_rank;
		l->cfg.pg_size = tl->pg_size;
		bpf_map__update_elem(c->skel->maps.comm_libs, &(__u32){slot}, sizeof(__u32),
				     &l->cfg, sizeof(l->cfg), BPF_ANY);
		note(c, "%s (build-id %s): process groups laid out as torch %s's", l->name,
		     l->build_id, tl->version);
		return 0; /* read just now, from the group itself */
	}
	if (l->group <= 0 || !(e->h.flags & COMM_F_GRP) || e->grp_size <= 0 ||
	    e->grp_size > (1 << 24) || e->grp_rank < 0 || e->grp_rank >= e->grp_size)
		return -ENOENT;
	*rank = e->grp_rank;
	*size = e->grp_size;
	return 0;
}

const struct torchlayout *comm__call_layout(const struct comm *c, const struct comm_call_event *e)
{
	unsigned int slot = COMM_COOKIE_LIB(e->h.cookie);

	return slot < c->nlibs && c->libs[slot].group > 0 ? c->libs[slot].tl : NULL;
}

const char *comm__notes(const struct comm *c)
{
	return c->notes.len ? sb_str(&c->notes) : NULL;
}

void comm__stats(const struct comm *c, struct comm_stats *out)
{
	__u64 vals[SAMPLER_MAX_CPUS];
	int i, ncpus = libbpf_num_possible_cpus();
	__u32 zero = 0;

	memset(out, 0, sizeof(*out));
	out->points = c->points;
	out->processes = c->processes;
	out->ub_detached = c->ub_detached;
	out->ub_attached_again = c->ub_attached_again;
	out->p2p_unwatched = c->p2p_unwatched;
	if (ncpus > 0 && ncpus <= SAMPLER_MAX_CPUS &&
	    !bpf_map__lookup_elem(c->skel->maps.comm_lost, &zero, sizeof(zero), vals,
				  sizeof(__u64) * ncpus, 0))
		for (i = 0; i < ncpus; i++)
			out->lost += vals[i];
}
