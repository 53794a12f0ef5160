/* SPDX-License-Identifier: MIT */
/*
 * torchlayout: where PyTorch and NCCL keep what the collectives probes read, for builds without
 * debug information (Debian's libtorch has only its dynamic symbol table): the process group's
 * next collective tag (decoded from the machine code of ProcessGroupGloo::nextTag), the size
 * fields of a c10::TensorImpl (known layouts, always checked against the tensors read), item
 * sizes, and a process group's name (its store's prefix chain, each hop checked by its RTTI
 * name). Everything read from a target is untrusted: a check that fails gives "unknown".
 */
#ifndef PROBING_TORCHLAYOUT_H
#define PROBING_TORCHLAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * The layout of one version of torch: where the fields the probes read sit, each an offsetof
 * computed by compiling that version's own headers (libtorch-dev and libgloo-dev of the same
 * Debian release; docs/torch.md "Layouts"). From 2.x a c10::intrusive_ptr_target is one
 * combined 8-byte count where 1.13 had two, so everything that derives from one moves.
 */
struct torchlayout {
	const char *version; /* "2.14" */
	uint16_t pg_rank;    /* c10d::ProcessGroup (1.13) or c10d::Backend (2.x): rank_ (int) */
	uint16_t pg_size;    /* size_ (int) */
	uint16_t pg_store;   /* ProcessGroupGloo::store_ (the GlooStore) */
	uint16_t prefix;     /* c10d::PrefixStore::prefix_ (std::string) */
	uint16_t ps_store;   /* c10d::PrefixStore::store_ (the store it wraps) */
	bool device_prefix;  /* the GlooStore's PrefixStore is the device's ("cpu/"), wrapping
			      * the group's (torch 2.x's _new_process_group_helper) */
	uint16_t ti_numel;   /* c10::TensorImpl::numel_ (data_type_ 8 bytes after it) */
};

/*
 * The known layout of the torch that a library file named @name (libtorch_cpu.so.2.14.1, as
 * Debian names it) belongs to, or NULL if the name says no version, or one not known.
 */
const struct torchlayout *torchlayout_by_name(const char *name);

/* Known layout number @i (0 the oldest), or NULL past the last. */
const struct torchlayout *torchlayout_known(unsigned int i);

/*
 * Which known layout the ProcessGroupGloo at @pg of process @pid has, confirmed by the object
 * itself: a c10d::ProcessGroupGloo::GlooStore (by its RTTI name) at the layout's store_, and
 * 0 <= rank_ < size_ there. Return it, with rank and size in *@rank and *@size, or NULL if no
 * known layout fits (then nothing read from the group can be trusted).
 */
const struct torchlayout *torchlayout_confirm_group(pid_t pid, uint64_t pg, int32_t *rank,
						    int32_t *size);

/*
 * The offset of the member ProcessGroupGloo::nextTag() returns and increments, from the first
 * bytes of its code (@code, @len bytes), after an optional endbr64: "mov disp(%rdi),%eax"
 * (torch 1.13), or "push %rbx; mov %rdi,%rbx; call checkInitialized; mov disp(%rbx),%eax"
 * (torch 2.x, which checks the group first). Return 0 and *@off, or -ENOENT if the code is
 * not of either form.
 */
int torchlayout_next_tag(const uint8_t *code, size_t len, uint16_t *off);

/* The TensorImpl fields of a layout: numel_ at @numel, data_type_ at numel + 8. */
#define TORCHLAYOUT_TENSOR_DEFAULT 168 /* torch 1.13 (libtorch-dev headers), checked live */
#define TORCHLAYOUT_TENSOR_2_14	   152 /* torch 2.14 */

enum torchlayout_check {
	TL_BAD = -1,	/* the bytes contradict the layout */
	TL_UNKNOWN = 0, /* they cannot tell (a tensor of more than 5 dimensions) */
	TL_GOOD = 1,	/* dimensions, sizes, numel, storage offset and dtype agree */
};

/*
 * Check that @hdr, the first @len bytes of a c10::TensorImpl, fits the layout whose numel_ is
 * at @numel: sizes_and_strides_ (the dimension count, 5 inline sizes, 5 strides),
 * storage_offset_, numel_ and data_type_ in a row (c10/core/TensorImpl.h since 1.9), the
 * product of the sizes being numel_.
 */
enum torchlayout_check torchlayout_tensor_check(const uint8_t *hdr, size_t len, uint16_t numel);

/*
 * Find a layout @hdr fits (a tensor of 1 to 5 dimensions with at least 2 elements, so that a
 * match is meaningful). Return 0 and *@numel, or -ENOENT.
 */
int torchlayout_tensor_find(const uint8_t *hdr, size_t len, uint16_t *numel);

/* numel_ and data_type_ of @hdr at the layout @numel (after a check). */
void torchlayout_tensor_read(const uint8_t *hdr, uint16_t numel, uint64_t *n, uint16_t *dtype);

/* Bytes of one element of c10::ScalarType @dtype, or 0 if unknown. */
unsigned int torchlayout_item_size(unsigned int dtype);

/* Bytes of one element of ncclDataType_t @dtype, or 0 if unknown. */
unsigned int torchlayout_nccl_size(unsigned int dtype);

/*
 * The name of the ProcessGroupGloo at @pg in process @pid, of layout @tl (NULL: unknown; each
 * known one is tried): the prefix of the PrefixStore its GlooStore wraps (on 2.x, of the one
 * that the device's PrefixStore wraps), which torch.distributed builds from the group's name
 * ("0" for the default group, the same on every rank), without its trailing '/'. The string is checked as a libstdc++ std::string (an
 * inline one points into itself). Return 0 and the name in @buf (escaped nowhere: the caller
 * stores it as data), or -errno (-ENOENT: not that layout).
 */
int torchlayout_group_name(pid_t pid, uint64_t pg, const struct torchlayout *tl, char *buf,
			   size_t size);

#endif
