/* SPDX-License-Identifier: MIT */
/*
 * What the collectives probes (comm.bpf.c) and userspace (user/record/comm.c, probes and
 * attachment; user/record/collectives.c, events to rows) share. Fixed-width fields only.
 *
 * Every probe point runs one program, comm_probe; its BPF cookie says what the point is
 * (COMM_COOKIE: role, operation, where the arguments are, which library). The events go into
 * the sampler's ring buffer (the map is shared), in the order they happened on each thread,
 * behind the samples; their first __u32 is EVENT_COMM.
 */
#ifndef PROBING_COMMPROBE_H
#define PROBING_COMMPROBE_H

#include "sampler.h"

/* Ring-buffer record type of every comm event: enum event_type (sampler.h) goes on here. */
#define EVENT_COMM 16

/* What a probe point is (the cookie's role). */
enum comm_role {
	COMM_R_GLOO_CALL = 1, /* ProcessGroupGloo::allreduce... entry: a call with its stack */
	COMM_R_GLOO_ENQUEUE,  /* ProcessGroupGloo::enqueue(work): the call's work object */
	COMM_R_GLOO_FINISH,   /* AsyncWork::finishWorkGloo(work): done on the worker thread */
	COMM_R_GLOO_ERROR,    /* AsyncWork::finishWorkGlooError(work): failed */
	COMM_R_GLOO_P2P,      /* ProcessGroupGloo::send/recv/recvAnysource entry */
	COMM_R_P2P_WORK,      /* ProcessGroupGloo::SendWork/RecvWork(tensor, buffer): a send/recv
			       * call's gloo::transport::UnboundBuffer, after it was posted */
	COMM_R_UB_DONE,	      /* UnboundBuffer::handleSendCompletion/handleRecvCompletion */
	COMM_R_NCCL_CALL,     /* ncclAllReduce... entry */
	COMM_R_NCCL_GROUP_START,
	COMM_R_NCCL_GROUP_END,
};

/* Operations (the cookie's op; collectives.op names them). */
enum comm_op {
	COMM_OP_ALLREDUCE = 1,
	COMM_OP_BROADCAST,
	COMM_OP_ALLGATHER,
	COMM_OP_BARRIER,
	COMM_OP_REDUCE,
	COMM_OP_GATHER,
	COMM_OP_SCATTER,
	COMM_OP_REDUCE_SCATTER,
	COMM_OP_ALLTOALL,
	COMM_OP_ALLREDUCE_COALESCED,
	COMM_OP_ALLGATHER_COALESCED,
	COMM_OP_ALLGATHER_BASE,
	COMM_OP_SEND,
	COMM_OP_RECV,
	COMM_OP_RECV_ANYSOURCE,
	COMM_OP_NR
};

/*
 * The cookie's argument byte. gloo calls: bits 0-3 the argument (1-based, the hidden return
 * slot being argument 1) that holds the tensors; COMM_ARG_TENSOR: that argument is one
 * at::Tensor& rather than a std::vector<at::Tensor>&; 0: no tensors (barrier). NCCL calls:
 * enum comm_nccl_args.
 */
#define COMM_ARG_INDEX	0x0f
#define COMM_ARG_TENSOR 0x10

/* Where an NCCL function has its count, datatype, peer (root) and communicator (nccl.h). */
enum comm_nccl_args {
	COMM_NCCL_COLL = 1,  /* (send, recv, count, datatype, op, comm, stream): AllReduce,
			     * ReduceScatter */
	COMM_NCCL_BROADCAST, /* (send, recv, count, datatype, root, comm, stream) */
	COMM_NCCL_BCAST,     /* (buff, count, datatype, root, comm, stream) */
	COMM_NCCL_REDUCE,    /* (send, recv, count, datatype, op, root, comm, stream) */
	COMM_NCCL_ALLGATHER, /* (send, recv, sendcount, datatype, comm, stream) */
	COMM_NCCL_P2P,	     /* (buff, count, datatype, peer, comm, stream): Send, Recv */
};

#define COMM_COOKIE(role, op, arg, lib) \
	((__u64)(role) | (__u64)(op) << 8 | (__u64)(arg) << 16 | (__u64)(lib) << 24)
#define COMM_COOKIE_ROLE(c) ((__u32)(c)&0xff)
#define COMM_COOKIE_OP(c)   ((__u32)((c) >> 8) & 0xff)
#define COMM_COOKIE_ARG(c)  ((__u32)((c) >> 16) & 0xff)
#define COMM_COOKIE_LIB(c)  ((__u32)((c) >> 24) & 0xff)

#define COMM_MAX_LIBS	 64 /* library files with probes (map comm_libs) */
#define COMM_MAX_TENSORS 8  /* tensors of one call whose sizes are read */
#define COMM_TENSOR_HDR \
	192 /* bytes of the first tensor's TensorImpl sent for checking
			      * (sizeof(c10::TensorImpl) in torch 1.13) */
#define COMM_OFF_NONE 0xffff

/*
 * Per library file (map comm_libs, index: the cookie's lib): the layouts read at a call.
 * Userspace fills it from the library's code and known layouts before attaching.
 */
struct comm_lib_cfg {
	__u16 pg_rank;	  /* c10d::ProcessGroup rank_ (int); COMM_OFF_NONE: unknown */
	__u16 pg_size;	  /* size_ (int) */
	__u16 pg_counter; /* ProcessGroupGloo::collectiveCounter_ (uint32): the next tag */
	__u16 ti_numel;	  /* c10::TensorImpl numel_ (int64) */
	__u16 ti_dtype;	  /* data_type_ (caffe2::TypeMeta index, uint16) */
	__u16 flags;	  /* COMM_LIB_* */
	__u16 _pad[2];
};

/* Key of the maps of send/recv buffers (comm.bpf.c: p2p_bufs, p2p_early). */
struct p2p_buf_key {
	__u32 pid; /* the process, as the recorder numbers it */
	__u32 _pad;
	__u64 ub; /* the gloo::transport::tcp::UnboundBuffer */
};

/* comm_lib_cfg.flags */
#define COMM_LIB_HDR \
	1u /* send the first tensor's header (tensor0): its layout is not checked yet */

/* comm_event.ev */
enum comm_ev {
	COMM_EV_CALL = 1,    /* struct comm_call_event: a call entered, with its stack */
	COMM_EV_ENQUEUE,     /* obj: the work object of the thread's last call */
	COMM_EV_DONE,	     /* obj: a work object (gloo) or unbound buffer (p2p) completed */
	COMM_EV_UB_POST,     /* obj: the unbound buffer of the thread's last p2p call */
	COMM_EV_GROUP_START, /* ncclGroupStart on this thread */
	COMM_EV_GROUP_END,   /* ncclGroupEnd */
	COMM_EV_MAPPED,	     /* the process maps a library that may have probe points */
};

/* comm_event.flags */
#define COMM_F_ERROR   1u  /* COMM_EV_DONE: finished with an error */
#define COMM_F_SEQ     2u  /* COMM_EV_CALL: seq was read */
#define COMM_F_GRP     4u  /* COMM_EV_CALL: grp_rank and grp_size were read */
#define COMM_F_TENSORS 8u  /* COMM_EV_CALL: ntensors and the sizes were read */
#define COMM_F_TAI     16u /* time_ns is CLOCK_TAI (else CLOCK_MONOTONIC) */
#define COMM_F_HDR     32u /* COMM_EV_CALL: tensor0 was read */
#define COMM_F_SITE \
	64u /* COMM_EV_CALL: no stack copy follows (stack_len 0): the native stack
			    * is that of call site `site` (struct site_checks), checked in place */

struct comm_event {
	__u32 type; /* EVENT_COMM */
	__u16 ev;   /* enum comm_ev */
	__u16 flags;
	__u32 pid, tid; /* as the recorder numbers them (sampler.h) */
	__u64 time_ns;	/* CLOCK_TAI, or CLOCK_MONOTONIC without COMM_F_TAI */
	__u64 obj;	/* what ev says */
	__u64 cookie;	/* the probe point's */
};

/*
 * A call. The issuing thread's stack follows as a sample (struct sample_event and what
 * follows it on the wire), so userspace unwinds it like any sample.
 */
struct comm_call_event {
	struct comm_event h;
	__u64 pg;	/* gloo: the ProcessGroupGloo; NCCL: the ncclComm_t */
	__u64 count;	/* NCCL: the element count */
	__s32 grp_rank; /* the process group's rank_ and size_ (COMM_F_GRP) */
	__s32 grp_size;
	__u32 seq;   /* gloo: collectiveCounter_ at entry, the tag this call takes (COMM_F_SEQ) */
	__s32 peer;  /* send/recv: the peer (-1: any source); NCCL broadcast, reduce: the root */
	__s32 tag;   /* send/recv: the user's tag */
	__u32 dtype; /* NCCL: ncclDataType_t */
	__u32 ntensors; /* tensors of the call (COMM_F_TENSORS) */
	__u32 _pad;
	__u64 numel[COMM_MAX_TENSORS];	/* numel_ of the first tensors */
	__u16 dtypes[COMM_MAX_TENSORS]; /* their data_type_ */
	__u8 tensor0[COMM_TENSOR_HDR];	/* the first TensorImpl's first bytes (its layout check) */
	__u64 site; /* COMM_F_SITE: the call site (struct site_checks.id) whose native stack this is */
	struct sample_event s;
};

#endif
