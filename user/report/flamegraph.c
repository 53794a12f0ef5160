// SPDX-License-Identifier: MIT
/*
 * The call tree and its two renderings. Nodes live in one array (indices, not pointers, so
 * growing it is cheap); a map (parent, symbol) -> child finds children while stacks are
 * added; siblings are sorted by name once, before rendering.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bmap.h"
#include "base/escape.h"
#include "base/util.h"
#include "bpf/waitclass.h"
#include "report/flamegraph.h"
#include "report/framename.h"
#include "report/profile.h"

#define NO_SYM UINT32_MAX

struct sym {
	char *name;
	char *module;
	enum frame_kind kind;
	int state;     /* an off-CPU state's pseudo-frame (enum wait_state), else -1 */
	uint32_t rank; /* position in byte order of names */
	uint8_t rgb[3];
};

struct node {
	uint32_t sym;	/* NO_SYM for the root */
	uint32_t child; /* first child; 0 = none (node 0, the root, is nobody's child) */
	uint32_t next;	/* next sibling; 0 = none */
	uint64_t total; /* samples in this node and below */
	uint64_t self;	/* samples whose leaf is this node */
	uint64_t base_total, base_self; /* the same in the baseline of a differential graph */
};

struct fg {
	struct sym *syms;
	size_t nsyms, capsyms;
	struct bmap *symmap; /* name -> symbol */
	struct node *nodes;
	size_t nnodes, capnodes;
	struct bmap *edges;   /* (parent, symbol) -> child */
	bool sorted;	      /* siblings are in name order */
	bool kinds[3];	      /* which kinds of frames occur (for the legend) */
	bool diff;	      /* a baseline was added: a differential graph */
	double max_delta;     /* differential: the largest |change of self share| */
	bool wall;	      /* weights are nanoseconds of wall-clock time (fg__add_profile) */
	uint64_t *state_w;    /* wall: per node, its weight in each state (nnodes x WAIT_NR) */
	size_t capstate;      /* nodes state_w has room for */
	bool states[WAIT_NR]; /* which states occur (for the legend) */
};

struct edge_key {
	uint32_t parent, sym;
};

/* ---- colours -------------------------------------------------------------------------------- */

static double absd(double v)
{
	return v < 0 ? -v : v;
}

/* To 0..255, rounded. */
static uint8_t byte(double v)
{
	return v <= 0 ? 0 : v >= 1 ? 255 : (uint8_t)(v * 255 + 0.5);
}

/* HSL (h in degrees, s and l in 0..1) to RGB; avoids libm, which the build does not link. */
static void hsl_rgb(double h, double s, double l, uint8_t rgb[3])
{
	double c = (1 - absd(2 * l - 1)) * s, hp = h / 60;
	double x = c * (1 - absd(hp - 2 * (int)(hp / 2) - 1));
	double m = l - c / 2, r = 0, g = 0, b = 0;

	if (hp < 1)
		r = c, g = x;
	else if (hp < 2)
		r = x, g = c;
	else if (hp < 3)
		g = c, b = x;
	else if (hp < 4)
		g = x, b = c;
	else if (hp < 5)
		r = x, b = c;
	else
		r = c, b = x;
	rgb[0] = byte(r + m);
	rgb[1] = byte(g + m);
	rgb[2] = byte(b + m);
}

/*
 * A colour from the frame's palette, chosen by a hash of its function name (for Python
 * frames without the "(file:line)" part, so one function keeps one colour on every line):
 * the same function has the same colour in every graph. Native code gets the warm colours
 * flame graphs are known for, Python blues, the kernel violets.
 */
static void sym_colour(struct sym *s)
{
	size_t n = strlen(s->name);
	const char *paren;
	uint64_t h;
	double v1, v2, v3;

	if (s->kind == FRAME_PYTHON && (paren = strstr(s->name, " (")))
		n = paren - s->name;
	h = hash_bytes(HASH_SEED, s->name, n);
	h ^= h >> 29; /* FNV's low bits are weak for short strings: fold the high ones in */
	v1 = (double)(h & 0xffff) / 0x10000;
	v2 = (double)((h >> 16) & 0xffff) / 0x10000;
	v3 = (double)((h >> 32) & 0xffff) / 0x10000;
	switch (s->kind) {
	case FRAME_PYTHON:
		hsl_rgb(185 + 40 * v1, 0.45 + 0.25 * v2, 0.62 + 0.10 * v3, s->rgb);
		break;
	case FRAME_KERNEL:
		hsl_rgb(258 + 42 * v1, 0.30 + 0.20 * v2, 0.66 + 0.08 * v3, s->rgb);
		break;
	default:
		hsl_rgb(2 + 48 * v1, 0.72 + 0.20 * v2, 0.56 + 0.10 * v3, s->rgb);
		break;
	}
}

/*
 * The colours of the off-CPU states' pseudo-frames: hues the frame palettes leave free (greens,
 * teals, pinks), greys for waiting for a CPU and the rest.
 */
static const uint8_t state_rgb[WAIT_NR][3] = {
	[WAIT_RUNNING] = {200, 200, 190}, [WAIT_RUNNABLE] = {165, 165, 165},
	[WAIT_SLEEP] = {120, 200, 120},	  [WAIT_LOCK] = {64, 178, 160},
	[WAIT_IO] = {176, 196, 64},	  [WAIT_GIL] = {236, 112, 176},
	[WAIT_OTHER] = {176, 150, 120},
};

/* ---- building ------------------------------------------------------------------------------- */

struct fg *fg__new(void)
{
	struct fg *g = calloc(1, sizeof(*g));

	if (!g)
		goto fail;
	g->symmap = bmap__new();
	g->edges = bmap__new();
	g->capnodes = 1024;
	g->nodes = calloc(g->capnodes, sizeof(*g->nodes));
	if (!g->symmap || !g->edges || !g->nodes)
		goto fail;
	g->nodes[0].sym = NO_SYM;
	g->nnodes = 1;
	g->sorted = true;
	return g;
fail:
	fg__free(g);
	errno = ENOMEM;
	return NULL;
}

void fg__free(struct fg *g)
{
	size_t i;

	if (!g)
		return;
	for (i = 0; i < g->nsyms; i++) {
		free(g->syms[i].name);
		free(g->syms[i].module);
	}
	free(g->syms);
	free(g->nodes);
	free(g->state_w);
	bmap__free(g->symmap);
	bmap__free(g->edges);
	free(g);
}

/* @s escaped for display (text_escape), malloc'd; NULL on ENOMEM. */
static char *display_dup(const char *s)
{
	struct strbuf sb = {0};

	if (text_escape(&sb, s, strlen(s), 0)) {
		sb_free(&sb);
		return NULL;
	}
	return sb.buf;
}

int fg__symbol(struct fg *g, const char *name, enum frame_kind kind, const char *module,
	       uint32_t *sym)
{
	struct sym *s, *tmp;
	uint64_t *slot;
	char *shown;
	int inserted;

	/* Symbols are keyed, merged and drawn by the name as displayed. */
	shown = display_dup(name);
	if (!shown)
		return -ENOMEM;
	slot = bmap__upsert(g->symmap, shown, strlen(shown), g->nsyms, &inserted);
	if (!slot)
		goto enomem;
	if (!inserted) {
		*sym = *slot;
		free(shown);
		return 0;
	}
	if (g->nsyms == g->capsyms) {
		size_t cap = g->capsyms ? g->capsyms * 2 : 256;

		tmp = realloc(g->syms, cap * sizeof(*tmp));
		if (!tmp)
			goto enomem_slot;
		g->syms = tmp;
		g->capsyms = cap;
	}
	s = &g->syms[g->nsyms];
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	s->state = -1;
	s->module = module ? display_dup(module) : NULL;
	if (module && !s->module)
		goto enomem_slot;
	s->name = shown;
	sym_colour(s);
	if ((unsigned)kind < ARRAY_SIZE(g->kinds))
		g->kinds[kind] = true;
	*sym = g->nsyms++;
	return 0;
enomem_slot:
	/* Keep the map consistent with the array: the name was inserted, point it nowhere. */
	*slot = NO_SYM;
enomem:
	free(shown);
	return -ENOMEM;
}

/* The pseudo-frame of off-CPU state @state ("[off-CPU: lock]"), coloured as the state. */
static int state_symbol(struct fg *g, int state, uint32_t *sym)
{
	char name[48];
	int err;

	snprintf(name, sizeof(name), "[off-CPU: %s]", wait_state_name(state));
	err = fg__symbol(g, name, FRAME_NATIVE, NULL, sym);
	if (!err && g->syms[*sym].state < 0) {
		g->syms[*sym].state = state;
		memcpy(g->syms[*sym].rgb, state_rgb[state], 3);
	}
	return err;
}

static int new_node(struct fg *g, uint32_t parent, uint32_t sym, uint32_t *out)
{
	struct node *n, *tmp;

	if (g->nnodes == g->capnodes) {
		tmp = realloc(g->nodes, g->capnodes * 2 * sizeof(*tmp));
		if (!tmp)
			return -ENOMEM;
		g->nodes = tmp;
		g->capnodes *= 2;
	}
	n = &g->nodes[g->nnodes];
	memset(n, 0, sizeof(*n));
	n->sym = sym;
	n->next = g->nodes[parent].child;
	g->nodes[parent].child = g->nnodes;
	*out = g->nnodes++;
	g->sorted = false;
	return 0;
}

/* Room in g->state_w for every node. */
static int grow_states(struct fg *g)
{
	size_t cap = g->capstate;
	uint64_t *tmp;

	if (g->nnodes <= cap)
		return 0;
	while (cap < g->nnodes)
		cap = cap ? cap * 2 : 1024;
	tmp = realloc(g->state_w, cap * WAIT_NR * sizeof(*tmp));
	if (!tmp)
		return -ENOMEM;
	memset(tmp + g->capstate * WAIT_NR, 0, (cap - g->capstate) * WAIT_NR * sizeof(*tmp));
	g->state_w = tmp;
	g->capstate = cap;
	return 0;
}

/* Count @count samples of the stack @syms in the graph's own counts, or with @base in the
 * baseline's; in a wall-clock graph, the own counts also by @state. */
static int add_counts(struct fg *g, const uint32_t *syms, size_t n, uint64_t count, bool base,
		      int state)
{
	bool by_state = g->wall && !base && state >= 0 && state < WAIT_NR;
	struct edge_key k;
	uint32_t node = 0, child;
	uint64_t *slot;
	size_t i;
	int inserted, err;

	for (i = 0; i < n; i++)
		if (syms[i] >= g->nsyms)
			return -EINVAL;
	/* Create the path first, then count: a failure leaves the totals consistent. */
	for (i = 0; i < n; i++) {
		k.parent = node;
		k.sym = syms[i];
		slot = bmap__upsert(g->edges, &k, sizeof(k), g->nnodes, &inserted);
		if (!slot)
			return -ENOMEM;
		child = *slot;
		if (inserted) {
			err = new_node(g, node, syms[i], &child);
			if (err) {
				*slot = 0; /* unreachable edge: points at the root, never followed */
				return err;
			}
		}
		node = child;
	}
	if (by_state) {
		err = grow_states(g);
		if (err)
			return err;
		g->states[state] = true;
	}
	node = 0;
	*(base ? &g->nodes[0].base_total : &g->nodes[0].total) += count;
	if (by_state)
		g->state_w[state] += count;
	for (i = 0; i < n; i++) {
		k.parent = node;
		k.sym = syms[i];
		node = *bmap__find(g->edges, &k, sizeof(k));
		*(base ? &g->nodes[node].base_total : &g->nodes[node].total) += count;
		if (by_state)
			g->state_w[(size_t)node * WAIT_NR + state] += count;
	}
	*(base ? &g->nodes[node].base_self : &g->nodes[node].self) += count;
	return 0;
}

int fg__add(struct fg *g, const uint32_t *syms, size_t n, uint64_t count)
{
	return add_counts(g, syms, n, count, false, WAIT_RUNNING);
}

int fg__add_base(struct fg *g, const uint32_t *syms, size_t n, uint64_t count)
{
	g->diff = true;
	return add_counts(g, syms, n, count, true, WAIT_RUNNING);
}

#define ALL_RANKS INT32_MIN

/* Is sample @i of @p one of rank @rank's (ALL_RANKS: every sample; -1: those without)? */
static bool of_rank(const struct profile *p, size_t i, int rank)
{
	const struct profile_process *pr;

	if (rank == ALL_RANKS)
		return true;
	pr = profile__process(p, p->samples[i].pid);
	return (pr ? pr->rank : -1) == rank;
}

/*
 * Add the samples of @p (of rank @rank, or ALL_RANKS) to the graph's own counts, or with
 * @base to the baseline's. A wall-clock graph (fg__add_profile of a profile with off-CPU
 * time) weighs them by time, nanoseconds, and puts each off-CPU state's pseudo-frame on top
 * of its stacks.
 */
static int add_profile(struct fg *g, const struct profile *p, bool base, int rank)
{
	struct strbuf name = {0};
	uint64_t *counts = NULL;
	uint32_t *syms = NULL, *path = NULL, maxn = 0, state_sym[WAIT_NR];
	size_t i, nst;
	uint32_t d;
	int err = 0, st;

	if (!base && p->wall)
		g->wall = true;
	nst = g->wall ? WAIT_NR : 1; /* weights per (stack, state) */
	counts = calloc((p->nstacks ? p->nstacks : 1) * nst, sizeof(*counts));
	syms = calloc(p->nframes ? p->nframes : 1, sizeof(*syms));
	if (!counts || !syms) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < p->nframes && !err; i++) {
		const struct frame *f = &p->frames[i];

		sb_reset(&name);
		err = frame_name(&name, f);
		if (!err)
			err = fg__symbol(g, sb_str(&name), f->kind,
					 f->kind == FRAME_PYTHON ? NULL : f->module, &syms[i]);
	}
	for (st = WAIT_RUNNING + 1; g->wall && st < WAIT_NR && !err; st++)
		err = state_symbol(g, st, &state_sym[st]);
	if (err)
		goto cleanup;
	/* Threads and processes are summed: the graph is of stacks. */
	for (i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];

		if (!of_rank(p, i, rank))
			continue;
		if (g->wall)
			counts[(size_t)s->stack * nst +
			       (s->state < WAIT_NR ? s->state : WAIT_OTHER)] += s->ns;
		else
			counts[s->stack] += s->count;
	}
	for (i = 0; i < p->nstacks; i++)
		if (p->stacks[i].n > maxn)
			maxn = p->stacks[i].n;
	path = malloc((maxn + 1) * sizeof(*path));
	if (!path) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < p->nstacks * nst && !err; i++) {
		const struct profile_stack *s = &p->stacks[i / nst];
		uint32_t n = s->n;

		if (!counts[i])
			continue;
		st = i % nst;
		/* The recording stores the leaf at depth 0; the tree wants the root first. */
		for (d = 0; d < s->n; d++)
			path[s->n - 1 - d] = syms[p->refs[s->first + d]];
		if (st != WAIT_RUNNING)
			path[n++] = state_sym[st];
		err = base ? fg__add_base(g, path, n, counts[i])
			   : add_counts(g, path, n, counts[i], false, st);
	}
cleanup:
	sb_free(&name);
	free(counts);
	free(syms);
	free(path);
	return err;
}

int fg__add_profile(struct fg *g, const struct profile *p)
{
	return add_profile(g, p, false, ALL_RANKS);
}

int fg__add_profile_rank(struct fg *g, const struct profile *p, int rank)
{
	return add_profile(g, p, false, rank < 0 ? -1 : rank);
}

int fg__add_profile_base(struct fg *g, const struct profile *p)
{
	g->diff = true;
	return add_profile(g, p, true, ALL_RANKS);
}

uint64_t fg__total(const struct fg *g)
{
	return g->nodes[0].total;
}

bool fg__wall(const struct fg *g)
{
	return g->wall;
}

uint64_t fg__base_total(const struct fg *g)
{
	return g->nodes[0].base_total;
}

/* ---- ordering ------------------------------------------------------------------------------- */

static int cmp_sym_name(const void *a, const void *b, void *arg)
{
	const struct sym *syms = arg;

	return strcmp(syms[*(const uint32_t *)a].name, syms[*(const uint32_t *)b].name);
}

static int cmp_node_rank(const void *a, const void *b, void *arg)
{
	const struct fg *g = arg;
	uint32_t ra = g->syms[g->nodes[*(const uint32_t *)a].sym].rank;
	uint32_t rb = g->syms[g->nodes[*(const uint32_t *)b].sym].rank;

	return ra < rb ? -1 : ra > rb;
}

/* Put every node's children in byte order of their names. */
static int sort_tree(struct fg *g)
{
	uint32_t *order = NULL, *kids = NULL, c;
	size_t i, n, cap = 0;
	int err = 0;

	if (g->sorted)
		return 0;
	order = malloc((g->nsyms ? g->nsyms : 1) * sizeof(*order));
	if (!order)
		return -ENOMEM;
	for (i = 0; i < g->nsyms; i++)
		order[i] = i;
	qsort_r(order, g->nsyms, sizeof(*order), cmp_sym_name, g->syms);
	for (i = 0; i < g->nsyms; i++)
		g->syms[order[i]].rank = i;

	for (i = 0; i < g->nnodes; i++) {
		n = 0;
		for (c = g->nodes[i].child; c; c = g->nodes[c].next) {
			if (n == cap) {
				size_t ncap = cap ? cap * 2 : 64;
				uint32_t *tmp = realloc(kids, ncap * sizeof(*tmp));

				if (!tmp) {
					err = -ENOMEM;
					goto cleanup;
				}
				kids = tmp;
				cap = ncap;
			}
			kids[n++] = c;
		}
		if (n < 2)
			continue;
		qsort_r(kids, n, sizeof(*kids), cmp_node_rank, g);
		g->nodes[i].child = kids[0];
		for (c = 0; c + 1 < n; c++)
			g->nodes[kids[c]].next = kids[c + 1];
		g->nodes[kids[n - 1]].next = 0;
	}
	g->sorted = true;
cleanup:
	free(order);
	free(kids);
	return err;
}

/* ---- folded stacks -------------------------------------------------------------------------- */

struct folded_ctx {
	struct fg *g;
	struct strbuf path;  /* "root;...;node" of the node being visited */
	struct strbuf lines; /* NUL-terminated lines */
	size_t *starts;
	size_t nlines, cap;
};

/* A node being visited by a walk of the tree (no recursion: a stack can be a million deep). */
struct visit {
	uint32_t node;
	uint32_t ch;	 /* the next child to visit; 0 = none left */
	size_t mark;	 /* folded: the path's length before this node */
	int depth;	 /* layout: the node's depth */
	uint64_t offset; /* layout: where its next child starts */
};

/* Push a visit of @node on *@stack (of *@n, room for *@cap). Return it, or NULL (no memory). */
static struct visit *visit_push(struct visit **stack, size_t *n, size_t *cap, uint32_t node)
{
	struct visit *v;

	if (grow_array(stack, cap, *n + 1, sizeof(**stack)))
		return NULL;
	v = &(*stack)[(*n)++];
	memset(v, 0, sizeof(*v));
	v->node = node;
	return v;
}

/* Enter @node: its name onto the path, its line if it has samples of its own. */
static int folded_enter(struct folded_ctx *c, uint32_t node)
{
	const struct node *n = &c->g->nodes[node];
	size_t mark = c->path.len;
	int err = 0;

	if (node) {
		const struct sym *s = &c->g->syms[n->sym];

		if (mark)
			err = sb_append(&c->path, ";", 1);
		if (!err)
			err = folded_append(&c->path, s->name, s->kind);
		if (err)
			return err;
	}
	if ((n->self || (c->g->diff && n->base_self)) && node) {
		if (c->nlines == c->cap) {
			size_t cap = c->cap ? c->cap * 2 : 1024;
			size_t *tmp = realloc(c->starts, cap * sizeof(*tmp));

			if (!tmp)
				return -ENOMEM;
			c->starts = tmp;
			c->cap = cap;
		}
		c->starts[c->nlines++] = c->lines.len;
		/* Differential: "stack BASELINE COUNT", as difffolded.pl writes it. */
		if (c->g->diff)
			err = sb_printf(&c->lines, "%s %llu %llu", sb_str(&c->path),
					(unsigned long long)n->base_self,
					(unsigned long long)n->self);
		else
			err = sb_printf(&c->lines, "%s %llu", sb_str(&c->path),
					(unsigned long long)n->self);
		if (!err)
			err = sb_append(&c->lines, "", 1); /* keep the NUL: lines are C strings */
	}
	return err;
}

/* Every node below @root, depth first, children in order: the lines of folded stacks. */
static int folded_visit(struct folded_ctx *c, uint32_t root)
{
	struct visit *stack = NULL, *v;
	size_t n = 0, cap = 0;
	int err;

	v = visit_push(&stack, &n, &cap, root);
	if (!v)
		return -ENOMEM;
	v->mark = c->path.len;
	v->ch = c->g->nodes[root].child;
	err = folded_enter(c, root);
	while (!err && n) {
		v = &stack[n - 1];
		if (v->ch) {
			uint32_t ch = v->ch;
			size_t mark = c->path.len;

			v->ch = c->g->nodes[ch].next;
			v = visit_push(&stack, &n, &cap, ch);
			if (!v) {
				err = -ENOMEM;
				break;
			}
			v->mark = mark;
			v->ch = c->g->nodes[ch].child;
			err = folded_enter(c, ch);
			continue;
		}
		c->path.len = v->mark;
		if (c->path.buf)
			c->path.buf[v->mark] = '\0';
		n--;
	}
	free(stack);
	return err;
}

static int cmp_line(const void *a, const void *b, void *arg)
{
	const char *base = arg;

	return strcmp(base + *(const size_t *)a, base + *(const size_t *)b);
}

int fg__folded(struct fg *g, struct strbuf *out)
{
	struct folded_ctx c = {.g = g};
	size_t i;
	int err;

	/* Samples with an empty stack (counted at the root) have no line to go on. */
	err = folded_visit(&c, 0);
	if (err)
		goto cleanup;
	qsort_r(c.starts, c.nlines, sizeof(*c.starts), cmp_line, c.lines.buf);
	err = sb_reserve(out, c.lines.len);
	for (i = 0; !err && i < c.nlines; i++) {
		const char *line = c.lines.buf + c.starts[i];

		err = sb_append(out, line, strlen(line));
		if (!err)
			err = sb_append(out, "\n", 1);
	}
cleanup:
	sb_free(&c.path);
	sb_free(&c.lines);
	free(c.starts);
	return err;
}

/* ---- layout --------------------------------------------------------------------------------- */

#define PAD	10   /* left and right margin, px */
#define FRAME_H 16   /* row height, px (the rect is one less: a 1 px gap between rows) */
#define FONT	12   /* frame labels, px */
#define CHAR_W	0.59 /* average glyph width of the label font, in ems */
#define TOP	56   /* frames start here: below the title, subtitle and legend rows */

/* Where frames start: a wall-clock graph has a row more, its off-CPU states' legend. */
static int frames_top(const struct fg *g)
{
	return g->wall ? TOP + 18 : TOP;
}
#define FOOTER 32 /* below the frames: the details line */

struct layout_ctx {
	struct fg *g;
	double scale, min_width; /* px per sample; the narrowest frame drawn */
	struct fg_box *boxes;
	size_t n, cap;
	int max_depth;
};

/* The box of @node at @depth and @offset; 1 if made, 0 if too narrow to draw, or -errno. */
static int lay_box(struct layout_ctx *c, uint32_t node, int depth, uint64_t offset)
{
	const struct node *n = &c->g->nodes[node];
	struct fg_box *b;

	if (node && n->total * c->scale < c->min_width)
		return 0;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 1024;
		struct fg_box *tmp = realloc(c->boxes, cap * sizeof(*tmp));

		if (!tmp)
			return -ENOMEM;
		c->boxes = tmp;
		c->cap = cap;
	}
	b = &c->boxes[c->n++];
	memset(b, 0, sizeof(*b));
	b->root = !node;
	b->node = node;
	b->state = -1;
	if (node) {
		const struct sym *s = &c->g->syms[n->sym];

		b->name = s->name;
		b->module = s->module;
		b->kind = s->kind;
		b->state = s->state;
	} else {
		b->name = "all";
		b->kind = FRAME_NATIVE;
	}
	b->depth = depth;
	b->offset = offset;
	b->count = n->total;
	b->self = n->self;
	b->base_count = n->base_total;
	b->base_self = n->base_self;
	b->x = PAD + offset * c->scale;
	b->width = n->total * c->scale;
	if (depth > c->max_depth)
		c->max_depth = depth;
	return 1;
}

/*
 * The boxes of @root and every node below it wide enough to draw, depth first (no
 * recursion: a stack can be a million deep). Children from the left; a node's own samples
 * are the space left on its right.
 */
static int lay(struct layout_ctx *c, uint32_t root)
{
	struct visit *stack = NULL, *v;
	size_t n = 0, cap = 0;
	int rc;

	rc = lay_box(c, root, 0, 0);
	if (rc <= 0)
		return rc;
	v = visit_push(&stack, &n, &cap, root);
	if (!v)
		return -ENOMEM;
	v->ch = c->g->nodes[root].child;
	while (n) {
		uint32_t ch;
		uint64_t offset;
		int depth;

		v = &stack[n - 1];
		if (!v->ch) {
			n--;
			continue;
		}
		ch = v->ch;
		offset = v->offset;
		depth = v->depth + 1;
		v->ch = c->g->nodes[ch].next;
		v->offset += c->g->nodes[ch].total;
		rc = lay_box(c, ch, depth, offset);
		if (rc < 0)
			break;
		if (!rc)
			continue;
		v = visit_push(&stack, &n, &cap, ch);
		if (!v) {
			rc = -ENOMEM;
			break;
		}
		v->ch = c->g->nodes[ch].child;
		v->depth = depth;
		v->offset = offset;
	}
	free(stack);
	return rc < 0 ? rc : 0;
}

static int image_width(const struct fg_options *o)
{
	return o->width > 0 ? o->width : 1200;
}

int fg__layout(struct fg *g, const struct fg_options *o, struct fg_box **boxes, size_t *n,
	       int *height)
{
	struct layout_ctx c = {.g = g};
	int width = image_width(o), top = frames_top(g), err;
	size_t i;

	err = sort_tree(g);
	if (err)
		return err;
	c.scale = g->nodes[0].total ? (double)(width - 2 * PAD) / g->nodes[0].total : 0;
	c.min_width = o->min_width > 0 ? o->min_width : (width - 2 * PAD) * 0.001;
	err = lay(&c, 0);
	if (err) {
		free(c.boxes);
		return err;
	}
	for (i = 0; i < c.n; i++)
		c.boxes[i].y = o->inverted ? top + c.boxes[i].depth * FRAME_H
					   : top + (c.max_depth - c.boxes[i].depth) * FRAME_H;
	*boxes = c.boxes;
	*n = c.n;
	*height = top + (c.max_depth + 1) * FRAME_H + FOOTER;
	return 0;
}

/* ---- SVG ------------------------------------------------------------------------------------ */

/* Number of UTF-8 code points in @s (invalid bytes count one each). */
static size_t cp_count(const char *s, size_t n)
{
	size_t i, k = 0;

	for (i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xc0) != 0x80;
	return k;
}

/* Byte length of the first @k code points of @s. */
static size_t cp_prefix(const char *s, size_t n, size_t k)
{
	size_t i = 0;

	while (i < n && k) {
		i++;
		while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80)
			i++;
		k--;
	}
	return i;
}

/*
 * The label drawn in a box: Python frames show their file's base name only ("f (a/b.py:3)"
 * -> "f (b.py:3)"; the tooltip has the full path), cut to what fits with "..". The script's
 * fit() does the same when a zoom changes the width. Appends the XML-escaped label.
 */
static int append_label(struct strbuf *sb, const struct fg_box *b)
{
	const char *name = b->name, *paren, *slash;
	struct strbuf tmp = {0};
	size_t n, fit, len;
	double room = (b->width - 6) / (FONT * CHAR_W);
	long maxc = room < 0 ? -1 : (long)room; /* floor, as the script's Math.floor */
	int err = 0;

	if (maxc < 3)
		return 0;
	if (b->kind == FRAME_PYTHON && !b->root && (paren = strstr(name, " (")) &&
	    (slash = strrchr(paren, '/'))) {
		err = sb_append(&tmp, name, paren + 2 - name);
		if (!err)
			err = sb_puts(&tmp, slash + 1);
		if (err)
			goto cleanup;
		name = tmp.buf;
	}
	len = strlen(name);
	n = cp_count(name, len);
	if (n <= (size_t)maxc) {
		err = xml_escape(sb, name, len);
	} else {
		fit = cp_prefix(name, len, maxc - 2);
		err = xml_escape(sb, name, fit);
		if (!err)
			err = sb_puts(sb, "..");
	}
cleanup:
	sb_free(&tmp);
	return err;
}

/*
 * The style and the interactive part, user/report/flamegraph.css and flamegraph.js, embedded by
 * the build (user/report/report.mk): each one a C string.
 */
extern const char probing_flamegraph_css[], probing_flamegraph_js[];

/* ---- differential colours -------------------------------------------------------------- */

/* How a box's self share changed from the baseline: shares in 0..1, after minus before. */
static double self_delta(const struct fg *g, uint64_t self, uint64_t base_self)
{
	double t = g->nodes[0].total, bt = g->nodes[0].base_total;

	return (t ? self / t : 0) - (bt ? base_self / bt : 0);
}

/* The largest |change| among the frames drawn, which the colours are scaled to. */
static void diff_scale(struct fg *g, const struct fg_box *boxes, size_t n)
{
	size_t i;

	g->max_delta = 0;
	for (i = 0; i < n; i++) {
		double d = absd(self_delta(g, boxes[i].self, boxes[i].base_self));

		if (d > g->max_delta)
			g->max_delta = d;
	}
}

/*
 * Red for a frame whose self share grew, blue for one that shrank, the deeper the larger the
 * change; light grey for no change (flamegraph.pl's differential colours).
 */
static void diff_rgb(const struct fg *g, const struct fg_box *b, uint8_t rgb[3])
{
	double d = self_delta(g, b->self, b->base_self);
	double i = g->max_delta > 0 ? absd(d) / g->max_delta : 0;
	uint8_t fade = (uint8_t)(225 - 190 * i + 0.5);

	if (d > 0) {
		rgb[0] = 255, rgb[1] = fade, rgb[2] = fade;
	} else if (d < 0) {
		rgb[0] = fade, rgb[1] = fade, rgb[2] = 255;
	} else {
		rgb[0] = rgb[1] = rgb[2] = 225;
	}
}

/* The tooltip's lines about the baseline: its samples, and the self share before and after. */
static int append_diff_title(struct strbuf *sb, const struct fg *g, const struct fg_box *b)
{
	double bt = g->nodes[0].base_total, t = g->nodes[0].total;
	double d = self_delta(g, b->self, b->base_self);
	char cnt[32];

	fmt_thousands(cnt, sizeof(cnt), b->base_count);
	return sb_printf(
		sb, "\nbaseline: %s sample%s, %.2f%%\nself: %.2f%% (baseline %.2f%%, %s%.2f%%)",
		cnt, b->base_count == 1 ? "" : "s", bt ? 100.0 * b->base_count / bt : 0,
		t ? 100.0 * b->self / t : 0, bt ? 100.0 * b->base_self / bt : 0,
		d > 0	? "+"
		: d < 0 ? "\xe2\x88\x92"
			: "\xc2\xb1",
		100.0 * absd(d));
}

static const char *kind_class(const struct fg_box *b)
{
	if (b->root)
		return "rt";
	return b->kind == FRAME_PYTHON ? "py" : b->kind == FRAME_KERNEL ? "kn" : "na";
}

static int append_escaped(struct strbuf *sb, const char *s)
{
	return xml_escape(sb, s, strlen(s));
}

static const struct {
	enum frame_kind kind;
	const char *label, *colour;
} legend[] = {
	{FRAME_PYTHON, "Python", "rgb(104,176,214)"},
	{FRAME_NATIVE, "native", "rgb(238,128,58)"},
	{FRAME_KERNEL, "kernel", "rgb(176,152,206)"},
};

/* A differential graph's legend instead (its colours say how frames changed, not kinds). */
static const struct {
	const char *label, *colour;
} diff_legend[] = {
	{"self share grew", "rgb(255,60,60)"},
	{"shrank", "rgb(60,60,255)"},
};

static int diff_legend_width(void)
{
	size_t i;
	int w = 0;

	for (i = 0; i < ARRAY_SIZE(diff_legend); i++)
		w += (int)(strlen(diff_legend[i].label) * 7.2) + 14 + (w ? 14 : 0);
	return w;
}

/* Width of a legend item: the swatch, a gap, the label (about 7.2 px a character). */
static int legend_item_width(size_t i)
{
	return (int)(strlen(legend[i].label) * 7.2) + 14;
}

/* A wall-clock graph's legend item of off-CPU state @st: "off-CPU: lock" (its pseudo-frames). */
static int state_item_width(int st)
{
	return (int)((strlen("off-CPU: ") + strlen(wait_state_name(st))) * 6.6) + 14;
}

/* What a legend shows: the kinds of frames, and the off-CPU states, of the graphs drawn. */
struct legend_set {
	bool kinds[3];
	bool diff;	      /* a differential graph: its colours instead */
	bool wall;	      /* wall-clock graphs: a second row, the off-CPU states */
	bool states[WAIT_NR]; /* with wall: the states that occur */
};

/* The legend of the graphs @pns[0..@n). */
static void legend_of(struct legend_set *lg, const struct fg_panel *pns, size_t n, bool diff)
{
	size_t i, k;

	memset(lg, 0, sizeof(*lg));
	lg->diff = diff;
	for (i = 0; i < n; i++) {
		for (k = 0; k < ARRAY_SIZE(lg->kinds); k++)
			lg->kinds[k] |= pns[i].g->kinds[k];
		lg->wall |= pns[i].g->wall;
		for (k = 0; pns[i].g->wall && k < WAIT_NR; k++)
			lg->states[k] |= pns[i].g->states[k];
	}
}

/* Width of the whole legend's first row, items 14 px apart; @lg: what it shows. */
static int legend_width(const struct legend_set *lg)
{
	size_t i;
	int w = 0;

	if (lg->diff)
		return diff_legend_width();
	for (i = 0; i < ARRAY_SIZE(legend); i++)
		if (lg->kinds[legend[i].kind])
			w += legend_item_width(i) + (w ? 14 : 0);
	return w;
}

/* The legend: one swatch per kind of frame present, right-aligned on the subtitle's row. */
static int append_legend(struct strbuf *sb, const struct legend_set *lg, int width, int y)
{
	int x = width - PAD, i, err = 0;

	err = sb_puts(sb, "<g id=\"legend\">\n");
	for (i = ARRAY_SIZE(diff_legend) - 1; lg->diff && i >= 0 && !err; i--) {
		int iw = (int)(strlen(diff_legend[i].label) * 7.2) + 14;

		err = sb_printf(sb,
				"<text class=\"end\" x=\"%d\" y=\"%d\">%s</text>"
				"<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" rx=\"2\" "
				"fill=\"%s\"/>\n",
				x, y, diff_legend[i].label, x - iw, y - 9, diff_legend[i].colour);
		x -= iw + 14;
	}
	if (lg->diff)
		return err ? err : sb_puts(sb, "</g>\n");
	/* Right to left, so the last item ends at the margin. Off-CPU states on a row of their
	 * own, below (frames_top). */
	for (i = WAIT_NR - 1; lg->wall && i > WAIT_RUNNING && !err; i--) {
		if (!lg->states[i])
			continue;
		err = sb_printf(sb,
				"<text class=\"end\" x=\"%d\" y=\"%d\">off-CPU: %s</text>"
				"<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" rx=\"2\" "
				"fill=\"rgb(%d,%d,%d)\"/>\n",
				x, y + 18, wait_state_name(i), x - state_item_width(i), y + 9,
				state_rgb[i][0], state_rgb[i][1], state_rgb[i][2]);
		x -= state_item_width(i) + 14;
	}
	x = width - PAD;
	for (i = ARRAY_SIZE(legend) - 1; i >= 0 && !err; i--) {
		if (!lg->kinds[legend[i].kind])
			continue;
		err = sb_printf(sb,
				"<text class=\"end\" x=\"%d\" y=\"%d\">%s</text>"
				"<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" rx=\"2\" "
				"fill=\"%s\"/>\n",
				x, y, legend[i].label, x - legend_item_width(i), y - 9,
				legend[i].colour);
		x -= legend_item_width(i) + 14;
	}
	if (!err)
		err = sb_puts(sb, "</g>\n");
	return err;
}

/* A wall-clock frame's time in seconds, its share, and the seconds in each state it was in. */
static int append_wall_title(struct strbuf *sb, const struct fg *g, const struct fg_box *b,
			     uint64_t total)
{
	const uint64_t *w = b->node < g->capstate ? &g->state_w[(size_t)b->node * WAIT_NR] : NULL;
	int err, st, n = 0;

	err = sb_printf(sb, "\n%.3f s, %.2f%%", b->count / 1e9, 100.0 * b->count / total);
	for (st = 0; w && st < WAIT_NR && !err; st++) {
		if (!w[st])
			continue;
		err = sb_printf(sb, "%s%s %.3f s", n++ ? ", " : "\n", wait_state_name(st),
				w[st] / 1e9);
	}
	return err;
}

/* A frame of the graph @g, in panel @panel of a multi-graph image (-1: the only graph). */
static int append_frame(struct strbuf *sb, const struct fg *g, const struct fg_box *b, int panel)
{
	char cnt[32];
	uint64_t total = g->nodes[0].total;
	uint8_t rgb[3] = {200, 200, 190}; /* the root: neutral */
	bool off;
	int err;

	if (!b->root) {
		uint64_t *slot = bmap__find(g->symmap, b->name, strlen(b->name));

		memcpy(rgb, g->syms[*slot].rgb, 3);
	}
	if (g->diff)
		diff_rgb(g, b, rgb);
	fmt_thousands(cnt, sizeof(cnt), b->count);
	/* Wall-clock: a frame whose time is all off-CPU is drawn faded. */
	off = g->wall && b->node < g->capstate && b->node &&
	      !g->state_w[(size_t)b->node * WAIT_NR + WAIT_RUNNING];
	err = sb_printf(sb, "<g class=\"%s%s\" data-o=\"%llu\" data-n=\"%llu\"", kind_class(b),
			off ? " off" : "", (unsigned long long)b->offset,
			(unsigned long long)b->count);
	if (!err && panel >= 0)
		err = sb_printf(sb, " data-p=\"%d\"", panel);
	if (!err)
		err = sb_puts(sb, "><title>");
	if (!err)
		err = append_escaped(sb, b->name);
	if (!err && g->wall)
		err = append_wall_title(sb, g, b, total);
	else if (!err)
		err = sb_printf(sb, "\n%s sample%s, %.2f%%", cnt, b->count == 1 ? "" : "s",
				100.0 * b->count / total);
	if (!err && g->diff)
		err = append_diff_title(sb, g, b);
	if (!err && b->module) {
		err = sb_puts(sb, "\n");
		if (!err)
			err = append_escaped(sb, b->module);
	}
	if (!err)
		err = sb_printf(sb,
				"</title><rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%d\" "
				"rx=\"2\" fill=\"rgb(%d,%d,%d)\"/><text x=\"%.2f\" y=\"%.1f\">",
				b->x, b->y, b->width, FRAME_H - 1, rgb[0], rgb[1], rgb[2], b->x + 3,
				b->y + 11.5);
	if (!err)
		err = append_label(sb, b);
	if (!err)
		err = sb_puts(sb, "</text></g>\n");
	return err;
}

/* Append @s cut to @maxc code points with "..", escaped; nothing when @maxc < 3. */
static int append_cut(struct strbuf *sb, const char *s, long maxc)
{
	size_t len = strlen(s);
	int err;

	if (maxc < 3)
		return 0;
	if (cp_count(s, len) <= (size_t)maxc)
		return xml_escape(sb, s, len);
	err = xml_escape(sb, s, cp_prefix(s, len, maxc - 2));
	return err ? err : sb_puts(sb, "..");
}

#define PANEL_GAP  16  /* between the panels of fg__svg_panels, px */
#define PANEL_MIN  300 /* the narrowest panel, px */
#define PANEL_HEAD 36  /* a panel's heading (two lines) above its frames, px */

/* Where a graph is drawn in the image, and its frames as laid out there. */
struct placed {
	const struct fg_panel *pn;
	double x, w; /* its left edge and width, px */
	struct fg_box *boxes;
	size_t n;
	int max_depth;
};

/*
 * Lay the graphs out side by side: @pl[i] gets its place, its boxes (moved to that place,
 * rows counted from @top, roots on one line) and its depth. *@width, *@height: the image's.
 */
static int place_panels(struct placed *pl, size_t n, const struct fg_options *o, int top,
			int *width, int *height)
{
	double pw = n > 1 ? (image_width(o) - 2.0 * PAD - (n - 1) * PANEL_GAP) / n
			  : image_width(o) - 2.0 * PAD;
	struct fg_options po = *o;
	int max_depth = 0, h, err;
	size_t i, k;

	if (n > 1 && pw < PANEL_MIN)
		pw = PANEL_MIN;
	po.width = (int)pw + 2 * PAD;
	/* fg__layout's scale: (width - 2 * PAD) px for all the samples; the rounding of the
	 * panel width above goes into the gaps. */
	pw = po.width - 2 * PAD;
	if (o->min_width <= 0)
		po.min_width = pw * 0.001;
	for (i = 0; i < n; i++) {
		pl[i].x = PAD + i * (pw + PANEL_GAP);
		pl[i].w = pw;
		if (!pl[i].pn->g->nodes[0].total)
			continue; /* an empty panel: its heading only */
		err = fg__layout(pl[i].pn->g, &po, &pl[i].boxes, &pl[i].n, &h);
		if (err)
			return err;
		for (k = 0; k < pl[i].n; k++) {
			pl[i].boxes[k].x += pl[i].x - PAD;
			if (pl[i].boxes[k].depth > pl[i].max_depth)
				pl[i].max_depth = pl[i].boxes[k].depth;
		}
		if (pl[i].max_depth > max_depth)
			max_depth = pl[i].max_depth;
	}
	for (i = 0; i < n; i++)
		for (k = 0; k < pl[i].n; k++)
			pl[i].boxes[k].y =
				o->inverted ? top + pl[i].boxes[k].depth * FRAME_H
					    : top + (max_depth - pl[i].boxes[k].depth) * FRAME_H;
	*width = n > 1 ? (int)(2 * PAD + n * pw + (n - 1) * PANEL_GAP + 0.5) : image_width(o);
	*height = top + (max_depth + 1) * FRAME_H + FOOTER;
	return 0;
}

/* The headings of the panels: label, note, and where search shows what it matched. */
static int append_headings(struct strbuf *out, const struct placed *pl, size_t n, int y)
{
	long maxc;
	size_t i;
	int err = 0;

	err = sb_puts(out, "<g id=\"panels\">\n");
	for (i = 0; !err && i < n; i++) {
		maxc = (long)((pl[i].w - 70) / (FONT * CHAR_W));
		if (pl[i].pn->flagged)
			err = sb_printf(out,
					"<rect class=\"flag\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" "
					"height=\"%d\" rx=\"3\"/>\n",
					pl[i].x - 4, y - 14, pl[i].w + 8, PANEL_HEAD - 2);
		/* The whole heading in its tooltip: the lines are cut to the panel's width. */
		err = err ?: sb_puts(out, "<g><title>");
		err = err ?: append_escaped(out, pl[i].pn->label ? pl[i].pn->label : "");
		if (!err && pl[i].pn->note)
			err = sb_puts(out, "\n") ?: append_escaped(out, pl[i].pn->note);
		err = err
			      ?: sb_printf(out,
					   "</title><text id=\"pl%zu\" class=\"pl%s\" x=\"%.2f\" "
					   "y=\"%d\">",
					   i, pl[i].pn->flagged ? " flag" : "", pl[i].x, y);
		err = err ?: append_cut(out, pl[i].pn->label ? pl[i].pn->label : "", maxc);
		err = err
			      ?: sb_printf(out,
					   "</text>\n<text id=\"pm%zu\" class=\"pm\" x=\"%.2f\" "
					   "y=\"%d\"> </text>\n",
					   i, pl[i].x + pl[i].w, y);
		if (!err && pl[i].pn->note) {
			err = sb_printf(out, "<text class=\"pn\" x=\"%.2f\" y=\"%d\">", pl[i].x,
					y + 15);
			err = err
				      ?: append_cut(out, pl[i].pn->note,
						    (long)(pl[i].w / (FONT * CHAR_W)));
			err = err ?: sb_puts(out, "</text>\n");
		}
		err = err ?: sb_puts(out, "</g>\n");
	}
	return err ?: sb_puts(out, "</g>\n");
}

/*
 * The image of @n graphs: one (fg__svg, @panels false: the layout of a single graph, no
 * headings) or several side by side.
 */
static int render(const struct fg_panel *pns, size_t n, bool panels, const struct fg_options *o,
		  struct strbuf *out)
{
	struct placed *pl = NULL;
	struct legend_set lg;
	bool diff = !panels && pns[0].g->diff;
	int width, top, height, max_depth = 0, err;
	const char *title = o->title && *o->title ? o->title : "Flame Graph";
	uint64_t total = 0;
	size_t i, k, nboxes = 0;

	for (i = 0; i < n; i++)
		total += pns[i].g->nodes[0].total;
	legend_of(&lg, pns, n, diff);
	/* Below the legend (a row more for wall-clock graphs) and the panels' headings. */
	top = (lg.wall ? TOP + 18 : TOP) + (panels ? PANEL_HEAD : 0);
	if (!total)
		return -ENODATA;
	pl = calloc(n, sizeof(*pl));
	if (!pl)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		pl[i].pn = &pns[i];
	err = place_panels(pl, n, o, top, &width, &height);
	if (err)
		goto cleanup;
	for (i = 0; i < n; i++) {
		nboxes += pl[i].n;
		if (pl[i].max_depth > max_depth)
			max_depth = pl[i].max_depth;
	}
	if (diff)
		diff_scale(pns[0].g, pl[0].boxes, pl[0].n);
	err = sb_reserve(out, 4096 + nboxes * 300);
	if (!err)
		err = sb_printf(
			out,
			"<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
			"<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" "
			"width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n"
			"<defs><linearGradient id=\"bg\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"1\">"
			"<stop offset=\"0\" stop-color=\"#f7f7f7\"/>"
			"<stop offset=\"1\" stop-color=\"#e9e9f1\"/></linearGradient></defs>\n"
			"<style type=\"text/css\"><![CDATA[\n%s]]></style>\n"
			"<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"url(#bg)\"/>\n"
			"<text id=\"title\" x=\"%d\" y=\"24\">",
			width, height, width, height, probing_flamegraph_css, width, height,
			width / 2);
	if (!err)
		err = append_cut(out, title, (width - 2 * 120) / 10);
	if (!err)
		err = sb_puts(out, "</text>\n");
	if (!err && o->subtitle && *o->subtitle) {
		/* Centred, clear of the legend on the right (so as much room on the left). */
		long room = (long)((width - 2 * (PAD + legend_width(&lg) + 16)) / (FONT * CHAR_W));
		bool cut = cp_count(o->subtitle, strlen(o->subtitle)) > (size_t)room;

		/* Cut short: the whole of it as the tooltip. */
		if (cut)
			err = sb_puts(out, "<g><title>")
				      ?: xml_escape(out, o->subtitle, strlen(o->subtitle))
				      ?: sb_puts(out, "</title>");
		err = err ?: sb_printf(out, "<text id=\"subtitle\" x=\"%d\" y=\"44\">", width / 2);
		if (!err)
			err = append_cut(out, o->subtitle, room);
		if (!err)
			err = sb_puts(out, cut ? "</text></g>\n" : "</text>\n");
	}
	if (!err)
		err = append_legend(out, &lg, width, 44);
	if (!err && panels)
		err = append_headings(out, pl, n, top - PANEL_HEAD + 14);
	if (!err)
		err = sb_printf(
			out,
			"<text id=\"reset\" class=\"ctl\" x=\"%d\" y=\"24\">Reset Zoom</text>\n"
			"<text id=\"search\" class=\"ctl\" x=\"%d\" y=\"24\">Search</text>\n"
			"<text id=\"details\" x=\"%d\" y=\"%d\"> </text>\n"
			"<text id=\"matched\" x=\"%d\" y=\"%d\"> </text>\n"
			"<g id=\"frames\">\n",
			PAD, width - PAD, PAD, height - 12, width - PAD, height - 12);
	for (i = 0; !err && i < n; i++)
		for (k = 0; !err && k < pl[i].n; k++)
			err = append_frame(out, pns[i].g, &pl[i].boxes[k], panels ? (int)i : -1);
	if (!err)
		err = sb_printf(
			out,
			"</g>\n"
			"<script type=\"text/ecmascript\"><![CDATA[\n"
			"var C = {width: %d, pad: %d, font: %d, fh: %d, top: %d, bottom: %d, "
			"inverted: %s, total: %llu, wall: %s",
			width, PAD, FONT, FRAME_H, top, top + max_depth * FRAME_H,
			o->inverted ? "true" : "false", (unsigned long long)total,
			lg.wall ? "true" : "false");
	/* Numbers only: the panels' labels are read from their headings (escaped text). */
	if (!err && panels) {
		err = sb_puts(out, ", panels: [");
		for (i = 0; !err && i < n; i++)
			err = sb_printf(out, "%s{x: %.4f, w: %.4f, total: %llu}", i ? ", " : "",
					pl[i].x, pl[i].w,
					(unsigned long long)pns[i].g->nodes[0].total);
		err = err ?: sb_puts(out, "]");
	}
	if (!err)
		err = sb_printf(out, "};\n%s]]></script>\n</svg>\n", probing_flamegraph_js);
cleanup:
	for (i = 0; pl && i < n; i++)
		free(pl[i].boxes);
	free(pl);
	return err;
}

int fg__svg(struct fg *g, const struct fg_options *o, struct strbuf *out)
{
	struct fg_panel one = {.g = g};

	return render(&one, 1, false, o, out);
}

int fg__svg_panels(const struct fg_panel *panels, size_t n, const struct fg_options *o,
		   struct strbuf *out)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (panels[i].g->diff)
			return -EINVAL;
	return n ? render(panels, n, true, o, out) : -ENODATA;
}
