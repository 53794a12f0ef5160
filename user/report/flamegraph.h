/* SPDX-License-Identifier: MIT */
/*
 * flamegraph: a call tree built from (stack, count) pairs, rendered as folded stacks or as an
 * interactive SVG (hover details, click-to-zoom, reset, regex search with a "matched" readout).
 * Pure code: no I/O, no SQLite; the caller feeds stacks and writes the text it gets back.
 *
 *   struct fg *g = fg__new();
 *   fg__symbol(g, "main", FRAME_NATIVE, "/usr/bin/app", &s[0]);   // intern names once
 *   fg__symbol(g, "work (app.py:3)", FRAME_PYTHON, NULL, &s[1]);
 *   fg__add(g, s, 2, 42);                                          // root first
 *   fg__svg(g, &opts, &out);  or  fg__folded(g, &out);
 *   fg__free(g);
 *
 * Frames with the same name at the same position of the tree are merged (that is what makes
 * the graph readable); siblings are ordered by name (byte order), so output is stable.
 */
#ifndef PROBING_FLAMEGRAPH_H
#define PROBING_FLAMEGRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/frame.h"
#include "base/util.h"

struct fg;

/* A new, empty call tree, or NULL (errno = ENOMEM). */
struct fg *fg__new(void);
/* Free the tree. NULL is a no-op. */
void fg__free(struct fg *g);

/*
 * Intern a frame name: @name is what the graph shows and merges by (framename.h), @kind
 * picks its palette, @module (may be NULL) is shown in its tooltip. The first @kind and
 * @module given for a name stay. Strings are copied, escaped for display (text_escape,
 * escape.h): names merge as displayed, and nothing the graph or the folded lines show holds
 * a control character or invalid UTF-8. Return 0 and the symbol in *@sym, or -ENOMEM.
 */
int fg__symbol(struct fg *g, const char *name, enum frame_kind kind, const char *module,
	       uint32_t *sym);

/*
 * Add @count samples of the stack @syms (symbols from fg__symbol, ROOT FIRST, @n of them;
 * n = 0 counts the samples at the root). Return 0, -EINVAL (unknown symbol) or -ENOMEM.
 */
int fg__add(struct fg *g, const uint32_t *syms, size_t n, uint64_t count);

struct profile;

/*
 * Add every sample of a loaded recording (profile.h), its frames named by framename.h; a
 * recording with off-CPU time makes a wall-clock graph (fg__wall). Return 0 or -ENOMEM.
 */
int fg__add_profile(struct fg *g, const struct profile *p);

/*
 * Add the samples of @p's processes of distributed rank @rank (profile_process.rank), or with
 * @rank < 0 those of the processes without a rank. Return 0 or -ENOMEM.
 */
int fg__add_profile_rank(struct fg *g, const struct profile *p, int rank);

/*
 * A differential flame graph (Brendan Gregg's difffolded.pl + flamegraph.pl): the graph is
 * drawn from the samples added with fg__add/fg__add_profile (the "after"), and the samples
 * added with these two (the baseline, "before") only colour it: each frame by the change of
 * its self share (its own samples over all samples) from the baseline to the graph, red where
 * it grew, blue where it shrank, the deeper the larger the change (relative to the largest
 * change in the graph); shares, not counts, so that profiles of different lengths compare.
 * Frames only in the baseline have no width: swap the two to see them. The folded output
 * becomes "stack BASELINE COUNT" lines. Same return values as fg__add/fg__add_profile.
 */
int fg__add_base(struct fg *g, const uint32_t *syms, size_t n, uint64_t count);
int fg__add_profile_base(struct fg *g, const struct profile *p);

/* Samples added so far; baseline samples added so far. */
uint64_t fg__total(const struct fg *g);
uint64_t fg__base_total(const struct fg *g);

/*
 * Is it a wall-clock graph: fg__add_profile was given a profile with off-CPU time
 * (profile.wall)? Its weights are then nanoseconds (on-CPU and off-CPU time, the profile's
 * samples.ns), each off-CPU stack has its state's pseudo-frame on top ("[off-CPU: lock]",
 * coloured per state), the SVG shows seconds and which states each frame's time was in, and
 * frames whose time is all off-CPU are drawn faded.
 */
bool fg__wall(const struct fg *g);

/*
 * Append the folded stacks to @out: one line "root;...;leaf COUNT\n" per distinct stack
 * with samples of its own, every stack however small, lines in byte order (what
 * 'LC_ALL=C sort' gives), kernel frames suffixed "_[k]"; for a differential graph
 * "root;...;leaf BASELINE COUNT\n" for every stack with samples in either. In a wall-clock
 * graph COUNT is nanoseconds. Return 0 or -ENOMEM.
 */
int fg__folded(struct fg *g, struct strbuf *out);

struct fg_options {
	const char *title;    /* NULL: "Flame Graph" */
	const char *subtitle; /* NULL: none */
	int width;	      /* image width in px; 0: 1200 */
	bool inverted;	      /* icicle graph: the root at the top, stacks growing down */
	/*
	 * Frames narrower than this (px) are left out of the SVG, with what they called (they
	 * are narrower still); their samples stay counted in their parents. <= 0: 0.1% of the
	 * width, i.e. 1.2 px at the default width.
	 */
	double min_width;
};

/* One frame as drawn: the layout fg__svg uses, exposed for tests. */
struct fg_box {
	const char *name;   /* display name ("all" for the root) */
	const char *module; /* or NULL */
	enum frame_kind kind;
	int state;     /* an off-CPU state's pseudo-frame (enum wait_state), else -1 */
	uint32_t node; /* in the tree */
	bool root;
	int depth;			/* 0 = the root */
	uint64_t offset;		/* samples to its left, counted over the whole graph */
	uint64_t count;			/* samples in it, callees included */
	uint64_t self;			/* samples of its own (it was the leaf) */
	uint64_t base_count, base_self; /* the same in the baseline (differential graphs) */
	double x, y, width;
};

/*
 * Lay the tree out for @o: every frame wide enough, parents before their children,
 * siblings left to right. *@boxes is malloc'd (the caller frees it; names point into the
 * tree, valid until fg__free), *@n the number of boxes, *@height the image height.
 * Return 0 or -ENOMEM.
 */
int fg__layout(struct fg *g, const struct fg_options *o, struct fg_box **boxes, size_t *n,
	       int *height);

/* Append the SVG image to @out. Return 0, -ENODATA (no samples) or -ENOMEM. */
int fg__svg(struct fg *g, const struct fg_options *o, struct strbuf *out);

/* One of several flame graphs drawn side by side (fg__svg_panels). */
struct fg_panel {
	struct fg *g;	   /* its call tree (not a differential one) */
	const char *label; /* its heading, e.g. "rank 3 (pid 1234)"; escaped for display */
	const char *note;  /* a second line under it, or NULL; escaped for display */
	bool flagged;	   /* drawn highlighted (the rank that differs most) */
};

/*
 * Append one SVG image of the @n graphs @panels side by side, left to right, each scaled to
 * its own samples (a box's width is its share of that graph), their roots on one line, each
 * with its heading. Every panel is @o->width / @n pixels wide, at least 300 (the image grows
 * instead). Hover, zoom (within a panel), reset and search work as in fg__svg; search shows
 * the share matched in each panel. Return 0, -ENODATA (no panel has samples), -EINVAL (a
 * differential graph) or -ENOMEM.
 */
int fg__svg_panels(const struct fg_panel *panels, size_t n, const struct fg_options *o,
		   struct strbuf *out);

#endif
