// SPDX-License-Identifier: MIT
/* Unit tests: the call tree, folded output, SVG layout and escaping. */
#include <errno.h>

#include "test.h"

#include "report/flamegraph.h"

/* Add "a;b;c" (native frames unless the name says otherwise) with @count samples. */
static void add(struct fg *g, const char *stack, uint64_t count)
{
	uint32_t syms[64];
	char buf[1024], *tok, *save = NULL;
	size_t n = 0;

	snprintf(buf, sizeof(buf), "%s", stack);
	for (tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
		enum frame_kind kind = strstr(tok, ".py:")   ? FRAME_PYTHON
				       : strstr(tok, "sys_") ? FRAME_KERNEL
							     : FRAME_NATIVE;

		REQUIRE(fg__symbol(g, tok, kind, kind == FRAME_NATIVE ? "/lib/libx.so" : NULL,
				   &syms[n]) == 0);
		n++;
	}
	CHECK_EQ(fg__add(g, syms, n, count), 0);
}

/* The same for the baseline of a differential graph. */
static void add_base(struct fg *g, const char *stack, uint64_t count)
{
	uint32_t syms[64];
	char buf[1024], *tok, *save = NULL;
	size_t n = 0;

	snprintf(buf, sizeof(buf), "%s", stack);
	for (tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save))
		REQUIRE(fg__symbol(g, tok, FRAME_NATIVE, NULL, &syms[n++]) == 0);
	CHECK_EQ(fg__add_base(g, syms, n, count), 0);
}

static const char *folded(struct fg *g)
{
	static struct strbuf sb;

	sb_reset(&sb);
	CHECK_EQ(fg__folded(g, &sb), 0);
	return sb_str(&sb);
}

TEST(tree_merges_identical_paths)
{
	struct fg *g = fg__new();

	REQUIRE(g);
	add(g, "main;work;compute", 3);
	add(g, "main;work;compute", 2);
	add(g, "main;work", 4);
	add(g, "main;idle", 1);
	CHECK_EQ(fg__total(g), 10);
	CHECK_STR(folded(g), "main;idle 1\n"
			     "main;work 4\n"
			     "main;work;compute 5\n");
	fg__free(g);
}

TEST(folded_lines_are_in_byte_order)
{
	struct fg *g = fg__new();

	REQUIRE(g);
	/* Added out of order; 'C' < '_' < 'a' and ' ' < '-' < ';' in byte order. */
	add(g, "b;x", 1);
	add(g, "a;b", 1);
	add(g, "a-x;c", 1);
	add(g, "a", 2);
	add(g, "_start;Zeta", 7);
	add(g, "_start;alpha", 7);
	CHECK_STR(folded(g), "_start;Zeta 7\n"
			     "_start;alpha 7\n"
			     "a 2\n"
			     "a-x;c 1\n"
			     "a;b 1\n"
			     "b;x 1\n");
	fg__free(g);
}

TEST(folded_marks_kernel_frames_and_keeps_tiny_stacks)
{
	struct fg *g = fg__new();

	REQUIRE(g);
	add(g, "main;read;ksys_read", 1);
	add(g, "main;run (app.py:3)", 1000000);
	CHECK_STR(folded(g), "main;read;ksys_read_[k] 1\n"
			     "main;run (app.py:3) 1000000\n");
	fg__free(g);
}

TEST(add_rejects_unknown_symbols)
{
	struct fg *g = fg__new();
	uint32_t bad = 7;

	REQUIRE(g);
	CHECK_EQ(fg__add(g, &bad, 1, 1), -EINVAL);
	CHECK_EQ(fg__total(g), 0);
	fg__free(g);
}

static const struct fg_box *find(const struct fg_box *b, size_t n, const char *name, int depth)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(b[i].name, name) && b[i].depth == depth)
			return &b[i];
	return NULL;
}

static bool near(double a, double b)
{
	return a - b < 0.001 && b - a < 0.001;
}

TEST(layout_is_proportional_and_nested)
{
	struct fg_options o = {.width = 1020}; /* 1000 px between the 10 px margins */
	struct fg *g = fg__new();
	const struct fg_box *root, *m, *a, *b, *c;
	struct fg_box *boxes = NULL;
	size_t n = 0, i, j;
	int height = 0;

	REQUIRE(g);
	add(g, "main;b_second", 300);
	add(g, "main;a_first", 500);
	add(g, "main;a_first;c_leaf", 100);
	add(g, "main", 100); /* main's own samples */
	REQUIRE(fg__layout(g, &o, &boxes, &n, &height) == 0);
	CHECK_EQ(n, 5);
	root = find(boxes, n, "all", 0);
	m = find(boxes, n, "main", 1);
	a = find(boxes, n, "a_first", 2);
	b = find(boxes, n, "b_second", 2);
	c = find(boxes, n, "c_leaf", 3);
	REQUIRE(root && m && a && b && c);
	CHECK(root->root && !m->root);
	CHECK(near(root->x, 10) && near(root->width, 1000));
	CHECK(near(m->width, 1000));
	/* Widths proportional to samples; siblings in name order from the left. */
	CHECK(near(a->x, 10) && near(a->width, 600));
	CHECK(near(b->x, 610) && near(b->width, 300));
	CHECK(near(c->x, 10) && near(c->width, 100));
	CHECK_EQ(a->offset, 0);
	CHECK_EQ(b->offset, 600);
	CHECK_EQ(a->count, 600);
	/* Every child inside its parent (in x), one row above it (y decreases upward). */
	for (i = 0; i < n; i++) {
		bool inside = boxes[i].root;

		for (j = 0; j < n; j++)
			if (boxes[j].depth == boxes[i].depth - 1 &&
			    boxes[j].x <= boxes[i].x + 1e-9 &&
			    boxes[i].x + boxes[i].width <= boxes[j].x + boxes[j].width + 1e-9 &&
			    near(boxes[j].y - 16, boxes[i].y))
				inside = true;
		CHECK(inside);
	}
	CHECK(height > 4 * 16);
	free(boxes);

	/* Inverted: the root on top, children below. */
	o.inverted = true;
	REQUIRE(fg__layout(g, &o, &boxes, &n, &height) == 0);
	root = find(boxes, n, "all", 0);
	c = find(boxes, n, "c_leaf", 3);
	REQUIRE(root && c);
	CHECK(near(c->y - root->y, 3 * 16));
	free(boxes);
	fg__free(g);
}

TEST(layout_leaves_out_narrow_frames_not_their_samples)
{
	struct fg_options o = {.width = 1020, .min_width = 5};
	struct fg *g = fg__new();
	struct fg_box *boxes = NULL;
	size_t n = 0;
	int height;

	REQUIRE(g);
	add(g, "main;big", 996);
	add(g, "main;tiny;deeper;deepest", 4); /* 4 px < 5 px */
	REQUIRE(fg__layout(g, &o, &boxes, &n, &height) == 0);
	CHECK_EQ(n, 3); /* all, main, big */
	CHECK(find(boxes, n, "tiny", 2) == NULL);
	CHECK(find(boxes, n, "deepest", 4) == NULL);
	CHECK_EQ(find(boxes, n, "main", 1)->count, 1000);
	free(boxes);
	/* The folded output keeps every stack. */
	CHECK_STR(folded(g), "main;big 996\nmain;tiny;deeper;deepest 4\n");
	fg__free(g);
}

TEST(svg_escapes_names)
{
	struct fg_options o = {.title = "T <&> \"q\"", .subtitle = "caf\xc3\xa9"};
	struct strbuf svg = {0};
	struct fg *g = fg__new();
	const char *s;

	REQUIRE(g);
	add(g, "std::vector<int>::push_back;<module> (a&b.py:1);it's \"x\"", 5);
	add(g, "bad\xff;\xe6\xbc\xa2", 5);
	add(g, "t\x1b[31mred\x07\nforged", 1);
	REQUIRE(fg__svg(g, &o, &svg) == 0);
	s = sb_str(&svg);
	CHECK(strstr(s, "<title>std::vector&lt;int&gt;::push_back\n5 samples, 45.45%\n"
			"/lib/libx.so</title>"));
	CHECK(strstr(s, "&lt;module&gt; (a&amp;b.py:1)"));
	CHECK(strstr(s, "it&#39;s &quot;x&quot;"));
	/* Names as text_escape shows them: invalid UTF-8 and control characters visible. */
	CHECK(strstr(s, "bad\\xff"));
	CHECK(strstr(s, "<title>t\\x1b[31mred\\x07\\nforged\n"));
	CHECK(!strchr(s, '\x1b') && !strchr(s, '\x07'));
	CHECK(strstr(s, "<title>\xe6\xbc\xa2\n"));
	CHECK(strstr(s, ">T &lt;&amp;&gt; &quot;q&quot;</text>"));
	CHECK(strstr(s, ">caf\xc3\xa9</text>"));
	/* No raw markup characters from names anywhere. */
	CHECK(!strstr(s, "<int>"));
	CHECK(!strstr(s, "<module>"));
	CHECK(!strstr(s, "\xff"));
	/* The script is in CDATA and nothing closes it early. */
	CHECK(strstr(s, "<![CDATA[") && strstr(strstr(s, "<script"), "]]></script>"));
	sb_free(&svg);
	fg__free(g);
}

TEST(svg_frames_carry_samples_and_kinds)
{
	struct fg_options o = {.width = 1020};
	struct strbuf svg = {0};
	struct fg *g = fg__new();
	const char *s;

	REQUIRE(g);
	add(g, "main;run (app.py:3);sys_read", 30);
	add(g, "main;zz", 70);
	REQUIRE(fg__svg(g, &o, &svg) == 0);
	s = sb_str(&svg);
	CHECK(strstr(s, "<g class=\"rt\" data-o=\"0\" data-n=\"100\">"));
	CHECK(strstr(s, "<g class=\"na\" data-o=\"0\" data-n=\"100\"><title>main\n"));
	CHECK(strstr(s, "<g class=\"py\" data-o=\"0\" data-n=\"30\"><title>run (app.py:3)\n"
			"30 samples, 30.00%</title><rect x=\"10.00\""));
	CHECK(strstr(s, "<g class=\"kn\" data-o=\"0\" data-n=\"30\">"));
	CHECK(strstr(s, "<g class=\"na\" data-o=\"30\" data-n=\"70\"><title>zz\n"));
	CHECK(strstr(s, "width=\"700.00\""));
	CHECK(strstr(s, "x=\"310.00\""));
	/* The legend lists the three kinds present. */
	CHECK(strstr(s, ">Python</text>") && strstr(s, ">native</text>") &&
	      strstr(s, ">kernel</text>"));
	sb_free(&svg);
	fg__free(g);
}

TEST(svg_labels_fit_their_boxes)
{
	struct fg_options o = {.width = 1020};
	struct strbuf svg = {0};
	struct fg *g = fg__new();
	const char *s;

	REQUIRE(g);
	/* 100 px: room for (100 - 6) / (12 * 0.59) = 13 characters. */
	add(g, "a_rather_long_function_name", 10);
	add(g, "b (/very/long/path/to/module.py:42)", 90);
	REQUIRE(fg__svg(g, &o, &svg) == 0);
	s = sb_str(&svg);
	CHECK(strstr(s, ">a_rather_lo..</text>"));
	/* Python labels show the file's base name; the tooltip keeps the path. */
	CHECK(strstr(s, ">b (module.py:42)</text>"));
	CHECK(strstr(s, "<title>b (/very/long/path/to/module.py:42)\n"));
	sb_free(&svg);
	fg__free(g);
}

TEST(svg_of_nothing_is_an_error)
{
	struct fg_options o = {0};
	struct strbuf svg = {0};
	struct fg *g = fg__new();

	REQUIRE(g);
	CHECK_EQ(fg__svg(g, &o, &svg), -ENODATA);
	CHECK_EQ(svg.len, 0);
	fg__free(g);
}

TEST(colours_are_deterministic_per_function)
{
	struct fg_options o = {.width = 1020};
	struct strbuf s1 = {0}, s2 = {0};
	struct fg *g1 = fg__new(), *g2 = fg__new();
	const char *a, *b;
	char fa[40], fb[40];

	REQUIRE(g1 && g2);
	add(g1, "x;f (m.py:1)", 1);
	add(g2, "y;z;f (m.py:1)", 5);
	REQUIRE(fg__svg(g1, &o, &s1) == 0 && fg__svg(g2, &o, &s2) == 0);
	a = strstr(strstr(s1.buf, "<title>f (m.py:1)"), "fill=\"");
	b = strstr(strstr(s2.buf, "<title>f (m.py:1)"), "fill=\"");
	REQUIRE(a && b);
	snprintf(fa, sizeof(fa), "%.*s", (int)strcspn(a + 6, "\""), a + 6);
	snprintf(fb, sizeof(fb), "%.*s", (int)strcspn(b + 6, "\""), b + 6);
	CHECK_STR(fa, fb);
	sb_free(&s1);
	sb_free(&s2);
	fg__free(g1);
	fg__free(g2);
}

/* The fill colour of the frame named @name in @svg, as "r,g,b". */
static const char *fill_of(const char *svg, const char *name, char *buf, size_t size)
{
	char title[128];
	const char *t, *f;

	snprintf(title, sizeof(title), "<title>%s\n", name);
	t = strstr(svg, title);
	f = t ? strstr(t, "fill=\"rgb(") : NULL;
	if (!f)
		return "";
	snprintf(buf, size, "%.*s", (int)strcspn(f + 10, ")"), f + 10);
	return buf;
}

/*
 * Ground truth: baseline main;a 50, main;b 50 (100); graph main;a 20, main;b 60, main;c 20
 * (100). Self shares change by a -30%, b +10%, c +20%: a is the deepest blue, c red, b a
 * lighter red; widths are the graph's, the baseline's counts go to the tooltip.
 */
TEST(diff_counts_colours_and_folded)
{
	struct fg_options o = {.width = 1020};
	struct fg *g = fg__new();
	struct fg_box *boxes = NULL;
	struct strbuf svg = {0};
	char ca[32], cb[32], cc[32], cm[32];
	size_t n = 0, i;
	int height;

	REQUIRE(g);
	add(g, "main;a", 20);
	add(g, "main;b", 60);
	add(g, "main;c", 20);
	add_base(g, "main;a", 50);
	add_base(g, "main;b", 50);
	add_base(g, "main;gone", 10); /* only in the baseline: drawn with no width */
	CHECK_EQ(fg__total(g), 100);
	CHECK_EQ(fg__base_total(g), 110);
	CHECK_STR(folded(g), "main;a 50 20\n"
			     "main;b 50 60\n"
			     "main;c 0 20\n"
			     "main;gone 10 0\n");
	REQUIRE(fg__layout(g, &o, &boxes, &n, &height) == 0);
	for (i = 0; i < n; i++) {
		if (!strcmp(boxes[i].name, "a")) {
			CHECK_EQ(boxes[i].count, 20);
			CHECK_EQ(boxes[i].base_count, 50);
			CHECK_EQ(boxes[i].base_self, 50);
			CHECK(near(boxes[i].width, 200));
		}
		CHECK(strcmp(boxes[i].name, "gone"));
	}
	free(boxes);
	REQUIRE(fg__svg(g, &o, &svg) == 0);
	/* a: 20/100 - 50/110 = -25.45% (the largest change): full blue. */
	CHECK_STR(fill_of(svg.buf, "a", ca, sizeof(ca)), "35,35,255");
	/* c: +20% of 25.45%: red at 0.786. b: 60% - 45.45% = +14.55%: red at 0.571. */
	CHECK_STR(fill_of(svg.buf, "c", cc, sizeof(cc)), "255,76,76");
	CHECK_STR(fill_of(svg.buf, "b", cb, sizeof(cb)), "255,116,116");
	/* main has no samples of its own in either: unchanged, grey. */
	CHECK_STR(fill_of(svg.buf, "main", cm, sizeof(cm)), "225,225,225");
	CHECK(strstr(svg.buf, "<title>a\n20 samples, 20.00%\nbaseline: 50 samples, 45.45%\n"
			      "self: 20.00% (baseline 45.45%, \xe2\x88\x92"
			      "25.45%)"));
	CHECK(strstr(svg.buf, "self share grew"));
	sb_free(&svg);
	fg__free(g);
}

TEST(graph_without_baseline_is_not_differential)
{
	struct fg *g = fg__new();

	REQUIRE(g);
	add(g, "main;a", 3);
	CHECK_EQ(fg__base_total(g), 0);
	CHECK_STR(folded(g), "main;a 3\n");
	fg__free(g);
}

TEST_MAIN()
