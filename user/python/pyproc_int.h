/* SPDX-License-Identifier: MIT */
/*
 * Internals shared by pyproc.c (discovery, BPF config, walking), pythreads.c (threads, tids,
 * names, pthread calibration), pycode.c (code objects, strings) and pyobj.c (dicts, ints,
 * instance attributes). Not a public interface.
 */
#ifndef PROBING_PYPROC_INT_H
#define PROBING_PYPROC_INT_H

#include "base/bmap.h"
#include "base/strpool.h"
#include "bpf/pywalk.h"
#include "python/pymem.h"
#include "pyoffsets/pyoffsets.h"
#include "python/pyproc.h"

/* One resolved code object (cache entry). */
struct pycode {
	const char *name;     /* interned (pp->strs) */
	const char *qualname; /* interned, NULL before 3.11 */
	const char *file;     /* interned */
	int firstlineno;
	uint8_t *table; /* line table bytes (co_lnotab / co_linetable) */
	size_t table_len;
	uint8_t *code;	/* its code units, read when an instruction without a line needs them */
	size_t ncode;	/* how many (2 bytes each) */
	bool code_read; /* reading them was tried */
	int err;	/* non-zero: the object could not be read (cached failure) */
};

/*
 * Objects and types located by their dynamic symbols in the interpreter's ELF (0 when
 * missing): values are recognised by identity (ob_type == &PyFloat_Type,
 * obj == &_Py_NoneStruct), which no subclass or look-alike can fake.
 */
#define PY_SYMOBJS(X)                              \
	X(PYS_NONE, "_Py_NoneStruct")              \
	X(PYS_TRUE, "_Py_TrueStruct")              \
	X(PYS_FALSE, "_Py_FalseStruct")            \
	X(PYS_ELLIPSIS, "_Py_EllipsisObject")      \
	X(PYS_NOTIMPL, "_Py_NotImplementedStruct") \
	X(PYS_INT, "PyLong_Type")                  \
	X(PYS_BOOL, "PyBool_Type")                 \
	X(PYS_FLOAT, "PyFloat_Type")               \
	X(PYS_STR, "PyUnicode_Type")               \
	X(PYS_BYTES, "PyBytes_Type")               \
	X(PYS_TUPLE, "PyTuple_Type")               \
	X(PYS_LIST, "PyList_Type")                 \
	X(PYS_DICT, "PyDict_Type")                 \
	X(PYS_SET, "PySet_Type")                   \
	X(PYS_FROZENSET, "PyFrozenSet_Type")       \
	X(PYS_CELL, "PyCell_Type")                 \
	X(PYS_MODULE, "PyModule_Type")             \
	X(PYS_FUNCTION, "PyFunction_Type")         \
	X(PYS_CFUNCTION, "PyCFunction_Type")       \
	X(PYS_CORO, "PyCoro_Type")                 \
	X(PYS_GEN, "PyGen_Type")                   \
	X(PYS_WEAKREF, "_PyWeakref_RefType")

#define PYS_ENUM_(id, sym) id,
enum py_symobj { PY_SYMOBJS(PYS_ENUM_) PYS_NR };
#undef PYS_ENUM_

struct pyproc {
	pid_t pid;
	unsigned int version; /* PY_VER(3, 11) */
	char version_str[32];
	struct py_offsets off;
	/* How frames are walked (bpf/pywalk.h), picked once from the version at open. */
	uint16_t frames; /* enum py_frames */
	uint16_t rules;	 /* PY_RULE_* */
	bool newer;	 /* newer than known, read with the newest known layout (confirmed) */
	char *elf_path;
	uint64_t bias;
	uint64_t runtime;   /* &_PyRuntime */
	uint64_t code_type; /* &PyCode_Type, 0 unknown */
	uint64_t objs[PYS_NR];
	struct pyproc_range eval[4];
	size_t neval;

	struct pythread *threads;
	size_t nthreads, capthreads;
	/* What pyproc__fill_tstates last wrote into the BPF map, so that the next fill writes and
	 * deletes only what changed; filled_known: it has written (and looked for stale entries
	 * of this pid in the whole map) once. */
	struct pythread_tss {
		uint64_t pthread, tstate;
	} * filled;
	size_t nfilled, capfilled;
	bool filled_known;
	int pthread_specific; /* -2 not calibrated yet, -1 unusable */
	int pthread_tid_off;  /* struct pthread.tid offset; -2 not calibrated, -1 unknown */
	/* 3.15+: the thread-local holding each thread's state, at fs base + tls_off */
	enum { TLS_NONE = 0, TLS_TENTATIVE, TLS_FINAL } tls_state;
	int64_t tls_off;

	struct strpool *strs; /* names, files, thread names: valid until pyproc__free */
	struct bmap *codes;   /* (code addr, checksum) -> index + 1 into code_arr */
	struct pycode *code_arr;
	size_t ncode, capcode;
	struct bmap *lines; /* (code addr, checksum, lasti) -> line + 1 */
	/* Thread names: interpreter thr_interp's threading._active and _limbo dicts, found again
	 * after thr_uses more uses (threading_dicts), and the attribute name objects
	 * "_native_id" and "_name" (0: not found yet). */
	uint64_t thr_interp, thr_active, thr_limbo, thr_key_native_id, thr_key_name;
	unsigned int thr_uses;
};

/* Read helpers bound to the target. */
static inline int pp_read(struct pyproc *pp, uint64_t addr, void *buf, size_t len)
{
	return pymem_read(pp->pid, addr, buf, len);
}

static inline int pp_ptr(struct pyproc *pp, uint64_t addr, uint64_t *out)
{
	return pymem_read_u64(pp->pid, addr, out);
}

/*
 * The record of the one frame at @frame (not a thread's chain: a suspended coroutine's
 * frame), made by the walk's own rules (bpf/pywalk.h: py_walk_frame, py_walk_code), as
 * pyproc__walk_ex makes each record: code object, instruction index, PYF_ENTRY and checksum
 * in meta. 0; -EFAULT when the frame holds no code object (or is a shim), or a read error.
 */
int py_frame_record(struct pyproc *pp, uint64_t frame, struct py_frame_rec *rec);

/* The object a _PyStackRef (3.14+: frame slots, f_executable) or a plain PyObject * (before)
 * holding @bits refers to; 0 for NULL and for tagged ints (3.14+, which are no objects). */
static inline uint64_t py_ref_obj(const struct pyproc *pp, uint64_t bits)
{
	if (!(pp->rules & PY_RULE_STACKREF))
		return bits;
	if ((bits & PY_STACKREF_TAG) == PY_STACKREF_TAG)
		return 0;
	return bits & ~PY_STACKREF_TAG;
}

/* Limits for strings read from the target (names, paths). */
#define PY_STR_MAX 4096

/*
 * Read the str object at @addr as UTF-8 (up to PY_STR_MAX bytes) into a malloc'd buffer
 * (*@out, *@len); a lone surrogate is written as its three bytes (not valid UTF-8: the
 * store repairs it, text_escape shows it). Return 0, -EINVAL (not a str, or not a
 * compact/ready one), -EFAULT or -ENOMEM.
 */
int py_read_str(struct pyproc *pp, uint64_t addr, char **out, size_t *len);

/*
 * Read the str object at @addr as code points: the first min(length, @max) of them into a
 * malloc'd array *@cps (*@n of them) and its whole length into *@length. 0, -EINVAL (not a
 * str: its type is neither PyUnicode_Type nor a subclass; or not a compact/ready one),
 * -EFAULT or -ENOMEM.
 */
int py_read_str_cps(struct pyproc *pp, uint64_t addr, size_t max, uint32_t **cps, size_t *n,
		    size_t *length);

/* As py_read_str, interned. NULL on failure (errno set). */
const char *py_str_interned(struct pyproc *pp, uint64_t addr);

/* Read the bytes object at @addr (at most @max bytes) into a malloc'd buffer. 0 or -errno. */
int py_read_bytes(struct pyproc *pp, uint64_t addr, size_t max, uint8_t **out, size_t *len);

/* The number of 30-bit digits and the sign of the int object at @addr. 0 or -errno. */
int py_long_header(struct pyproc *pp, uint64_t addr, uint64_t *ndigits, bool *negative);

/* Read a small int object (fits in 64 bits). 0, -ERANGE or -errno. */
int py_read_long(struct pyproc *pp, uint64_t addr, int64_t *out);

/*
 * type.__name__ of the type object at @tp into @buf, as Objects/typeobject.c type_name gives
 * it: ht_name for heap types (classes, and C types made from a spec, whose tp_name keeps the
 * module: "re.Pattern" -> "Pattern"), tp_name without its module part for static types
 * ("collections.OrderedDict" -> "OrderedDict"). 0, -EINVAL (not a printable name within
 * @size) or -errno.
 */
int py_type_name(struct pyproc *pp, uint64_t tp, char *buf, size_t size);

/*
 * Call @fn(key, value, ctx) for each live entry of the dict at @dict (at most @limit);
 * stops early if @fn returns non-zero and returns that. 0 or -errno.
 */
int py_dict_foreach(struct pyproc *pp, uint64_t dict, size_t limit,
		    int (*fn)(struct pyproc *pp, uint64_t key, uint64_t value, void *ctx),
		    void *ctx);

/* Value of str key @name in dict @dict. 0, -ENOENT or -errno. */
int py_dict_get_str(struct pyproc *pp, uint64_t dict, const char *name, uint64_t *value);

/* Instance attribute @name of @obj, looked up in its __dict__ (or inline values). */
int py_getattr_dict(struct pyproc *pp, uint64_t obj, const char *name, uint64_t *value);

/*
 * As py_getattr_dict, for lookups repeated on many objects: *@key (0 at first) is set to the
 * address of the str object that matched @name (an interned attribute name), and later
 * lookups compare key addresses before reading any key; if none is that object, the
 * strings are compared again.
 */
int py_getattr_dict_keyed(struct pyproc *pp, uint64_t obj, const char *name, uint64_t *key,
			  uint64_t *value);

#endif
