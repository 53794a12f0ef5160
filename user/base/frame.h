/* SPDX-License-Identifier: MIT */
/* One symbolized stack frame, as every stage after unwinding passes it around. */
#ifndef PROBING_FRAME_H
#define PROBING_FRAME_H

enum frame_kind {
	FRAME_NATIVE = 0,
	FRAME_PYTHON = 1,
	FRAME_KERNEL = 2,
};

/*
 * Strings are borrowed: the module that produced the frame owns them and keeps them alive
 * for as long as it lives (symbol caches, the Python code cache), so frames can be stored
 * and compared by content without copying.
 */
struct frame {
	enum frame_kind kind;
	const char *func;     /* bare name, never NULL: "[unknown]" or "[libfoo.so+0x1a2b]" */
	const char *qualname; /* Python co_qualname (3.11+) or NULL */
	const char *file;     /* source file, NULL if unknown */
	int line;	      /* source line, 0 if unknown */
	const char *module;   /* ELF path (native), "[kernel]" / module name (kernel), .py path */
};

/* "python" / "native" / "kernel", as stored in frames.kind. */
static inline const char *frame_kind_name(enum frame_kind k)
{
	return k == FRAME_PYTHON ? "python" : k == FRAME_KERNEL ? "kernel" : "native";
}

#endif
