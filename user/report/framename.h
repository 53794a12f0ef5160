/* SPDX-License-Identifier: MIT */
/*
 * framename: how a frame is named in flame graphs, folded stacks and exports
 * (docs/design.md §4 "Frame names"),
 * and the inverse for folded input.
 *
 *   Python   qualname (file:line)   co_qualname where the recording has it, else co_name;
 *                                   "name (file)" when the line is unknown, "name" when
 *                                   the file is
 *   native   func                   the demangled symbol; the module is shown in tooltips
 *   kernel   func                   in folded stacks "func_[k]", the suffix flamegraph.pl
 *                                   and perf's stackcollapse use for kernel frames
 */
#ifndef PROBING_FRAMENAME_H
#define PROBING_FRAMENAME_H

#include "base/frame.h"
#include "base/util.h"

/*
 * Append the display name of @f to @sb, its parts (names, file) escaped by text_escape
 * (escape.h): a display name holds no control character and no invalid UTF-8, whatever
 * the target or the recording held. Return 0 or -ENOMEM.
 */
int frame_name(struct strbuf *sb, const struct frame *f);

/*
 * Append the name of @f as one element of a folded stack: the display name (line breaks
 * escaped like every control character) with ';' (the frame separator) turned into ':',
 * "_[k]" after kernel frames. Return 0 or -ENOMEM.
 */
int frame_folded_name(struct strbuf *sb, const struct frame *f);

/* The same for a frame already named: append display name @name (escaped here too) of a @kind
 * frame. */
int folded_append(struct strbuf *sb, const char *name, enum frame_kind kind);

/*
 * Parse one element of a folded stack (NUL-terminated @s, modified in place) into *@f; the
 * strings of *@f point into @s. The inverse of frame_folded_name:
 *   "name (file:line)"   Python (qualname = name when it holds a '.', func = its last part)
 *   "func_[k]"           kernel
 *   "func [module]"      native with its module
 *   anything else        native
 * A prefix "py:", "native:" or "kernel:" forces the kind (then "py:name (file)" and
 * "py:name" are Python frames too). Return 0, or -EINVAL for an empty name.
 */
int frame_parse_folded(char *s, struct frame *f);

#endif
