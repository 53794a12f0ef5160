// SPDX-License-Identifier: MIT
/* Unit tests: frame names (docs/design.md §4) and parsing them back from folded stacks. */
#include <errno.h>

#include "test.h"

#include "report/framename.h"

static const char *name(const struct frame *f)
{
	static struct strbuf sb;

	sb_reset(&sb);
	CHECK_EQ(frame_name(&sb, f), 0);
	return sb_str(&sb);
}

static const char *folded(const struct frame *f)
{
	static struct strbuf sb;

	sb_reset(&sb);
	CHECK_EQ(frame_folded_name(&sb, f), 0);
	return sb_str(&sb);
}

TEST(python_names_use_qualname_file_and_line)
{
	struct frame f = {
		.kind = FRAME_PYTHON, .func = "step", .file = "/src/train.py", .line = 12};

	CHECK_STR(name(&f), "step (/src/train.py:12)");
	f.qualname = "Trainer.step";
	CHECK_STR(name(&f), "Trainer.step (/src/train.py:12)");
	f.line = 0;
	CHECK_STR(name(&f), "Trainer.step (/src/train.py)");
	f.file = NULL;
	CHECK_STR(name(&f), "Trainer.step");
}

TEST(native_and_kernel_names)
{
	struct frame n = {.kind = FRAME_NATIVE,
			  .func = "std::vector<int>::push_back",
			  .module = "/usr/lib/libfoo.so",
			  .file = "vector.h",
			  .line = 3};
	struct frame k = {.kind = FRAME_KERNEL, .func = "do_syscall_64", .module = "[kernel]"};

	CHECK_STR(name(&n), "std::vector<int>::push_back");
	CHECK_STR(folded(&n), "std::vector<int>::push_back");
	CHECK_STR(name(&k), "do_syscall_64");
	CHECK_STR(folded(&k), "do_syscall_64_[k]");
}

TEST(folded_names_cannot_break_the_line)
{
	struct frame f = {.kind = FRAME_PYTHON, .func = "f", .file = "odd;name\n.py", .line = 1};
	struct frame g = {.kind = FRAME_NATIVE, .func = "a;b\r\nc 1", .module = "/lib/x.so"};

	CHECK_STR(folded(&f), "f (odd:name\\n.py:1)");
	CHECK_STR(folded(&g), "a:b\\r\\nc 1");
}

TEST(names_are_escaped_for_display)
{
	/* Names read from a target: an OSC title sequence, a forged line, invalid UTF-8. */
	struct frame f = {.kind = FRAME_PYTHON,
			  .func = "f",
			  .qualname = "C.\x1b]0;pwned\x07m",
			  .file = "a\nThread 1 \"x\"\xff.py",
			  .line = 3};
	struct frame n = {.kind = FRAME_NATIVE,
			  .func = "sym\xc2\x9b"
				  "2J",
			  .module = "/x"};

	CHECK_STR(name(&f), "C.\\x1b]0;pwned\\x07m (a\\nThread 1 \"x\"\\xff.py:3)");
	CHECK_STR(folded(&f), "C.\\x1b]0:pwned\\x07m (a\\nThread 1 \"x\"\\xff.py:3)");
	CHECK_STR(name(&n), "sym\\u009b2J");
}

TEST(parse_python)
{
	char s[] = "Trainer.step (/src/my file.py:12)";
	struct frame f;

	CHECK_EQ(frame_parse_folded(s, &f), 0);
	CHECK_EQ(f.kind, FRAME_PYTHON);
	CHECK_STR(f.func, "step");
	CHECK_STR(f.qualname, "Trainer.step");
	CHECK_STR(f.file, "/src/my file.py");
	CHECK_EQ(f.line, 12);
	CHECK_STR(name(&f), "Trainer.step (/src/my file.py:12)");
}

TEST(parse_module_frame_without_qualname)
{
	char s[] = "<module> (a.py:1)";
	struct frame f;

	CHECK_EQ(frame_parse_folded(s, &f), 0);
	CHECK_EQ(f.kind, FRAME_PYTHON);
	CHECK_STR(f.func, "<module>");
	CHECK(f.qualname == NULL);
}

TEST(parse_kernel_native_and_module)
{
	char k[] = "ksys_read_[k]", n[] = "operator new(unsigned long)",
	     m[] = "memcpy [/lib/libc.so.6]", c[] = "f (x)";
	struct frame f;

	CHECK_EQ(frame_parse_folded(k, &f), 0);
	CHECK_EQ(f.kind, FRAME_KERNEL);
	CHECK_STR(f.func, "ksys_read");
	CHECK_EQ(frame_parse_folded(n, &f), 0);
	CHECK_EQ(f.kind, FRAME_NATIVE);
	CHECK_STR(f.func, "operator new(unsigned long)");
	CHECK_EQ(frame_parse_folded(m, &f), 0);
	CHECK_EQ(f.kind, FRAME_NATIVE);
	CHECK_STR(f.func, "memcpy");
	CHECK_STR(f.module, "/lib/libc.so.6");
	/* No line number: not recognisable as Python without the prefix. */
	CHECK_EQ(frame_parse_folded(c, &f), 0);
	CHECK_EQ(f.kind, FRAME_NATIVE);
	CHECK_STR(f.func, "f (x)");
}

TEST(parse_prefixes_force_the_kind)
{
	char p1[] = "py:f (x.py)", p2[] = "py:run", k[] = "kernel:schedule",
	     n[] = "native:g (a.c:3)", e[] = "";
	struct frame f;

	CHECK_EQ(frame_parse_folded(p1, &f), 0);
	CHECK_EQ(f.kind, FRAME_PYTHON);
	CHECK_STR(f.file, "x.py");
	CHECK_EQ(f.line, 0);
	CHECK_EQ(frame_parse_folded(p2, &f), 0);
	CHECK_EQ(f.kind, FRAME_PYTHON);
	CHECK_STR(f.func, "run");
	CHECK(f.file == NULL);
	CHECK_EQ(frame_parse_folded(k, &f), 0);
	CHECK_EQ(f.kind, FRAME_KERNEL);
	CHECK_STR(f.func, "schedule");
	CHECK_EQ(frame_parse_folded(n, &f), 0);
	CHECK_EQ(f.kind, FRAME_NATIVE);
	CHECK_STR(f.func, "g (a.c:3)");
	CHECK_EQ(frame_parse_folded(e, &f), -EINVAL);
}

TEST(round_trip)
{
	const char *names[] = {"a.b.<locals>.c (/x/y.py:7)", "do_sys_open_[k]", "main",
			       "std::map<int, std::string>::find", "caf\xc3\xa9 (p.py:1)"};
	struct strbuf sb = {0};
	char buf[256];
	struct frame f;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(buf, sizeof(buf), "%s", names[i]);
		CHECK_EQ(frame_parse_folded(buf, &f), 0);
		sb_reset(&sb);
		CHECK_EQ(frame_folded_name(&sb, &f), 0);
		CHECK_STR(sb_str(&sb), names[i]);
	}
	sb_free(&sb);
}

TEST_MAIN()
