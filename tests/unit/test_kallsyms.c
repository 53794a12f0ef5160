// SPDX-License-Identifier: MIT
#include "native/kallsyms.h"
#include "test.h"

static const char text[] = "ffffffff81000000 T _stext\n"
			   "ffffffff81000100 t do_one_initcall\n"
			   "ffffffff81002000 D some_data\n"
			   "ffffffff81001000 T vfs_read\n"
			   "ffffffffc0000000 t nfs_read\t[nfs]\n";

TEST(nearest_symbol_below)
{
	struct kallsyms *ks = kallsyms__parse(text);
	struct frame f;

	REQUIRE(ks);
	f = kallsyms__frame(ks, 0xffffffff81000150ULL);
	CHECK_STR(f.func, "do_one_initcall");
	CHECK_STR(f.module, "[kernel]");
	CHECK_EQ(f.kind, FRAME_KERNEL);
	/* Data symbols do not name code. */
	f = kallsyms__frame(ks, 0xffffffff81002010ULL);
	CHECK_STR(f.func, "vfs_read");
	f = kallsyms__frame(ks, 0xffffffffc0000010ULL);
	CHECK_STR(f.func, "nfs_read");
	CHECK_STR(f.module, "[nfs]");
	f = kallsyms__frame(ks, 0x1000);
	CHECK_STR(f.func, "[kernel]");
	kallsyms__free(ks);
}

TEST_MAIN()
