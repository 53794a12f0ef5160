// SPDX-License-Identifier: MIT
/* Symbolization against the real workload binaries in build/workloads (built -O2 -g). */
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <elfutils/libdwfl.h>

#include "native/symbolize.h"
#include "test.h"

static char *debuginfo_path;
static const Dwfl_Callbacks callbacks = {
	.find_elf = dwfl_build_id_find_elf,
	.find_debuginfo = dwfl_standard_find_debuginfo,
	.debuginfo_path = &debuginfo_path,
};

static Dwfl_Module *report(Dwfl **dwfl, const char *path)
{
	Dwfl_Module *m;

	*dwfl = dwfl_begin(&callbacks);
	dwfl_report_begin(*dwfl);
	m = dwfl_report_elf(*dwfl, path, path, -1, 0x100000, true);
	dwfl_report_end(*dwfl, NULL, NULL);
	return m;
}

/* Address range of symbol @name in @m. */
static int sym_range(Dwfl_Module *m, const char *name, GElf_Addr *lo, GElf_Addr *hi)
{
	int i, n = dwfl_module_getsymtab(m);
	GElf_Sym sym;
	GElf_Addr addr;

	for (i = 0; i < n; i++) {
		const char *s = dwfl_module_getsym_info(m, i, &sym, &addr, NULL, NULL, NULL);

		if (s && !strcmp(s, name)) {
			*lo = addr;
			*hi = addr + sym.st_size;
			return 0;
		}
	}
	return -1;
}

TEST(inline_chain_innermost_first)
{
	struct symbolizer *sz = symbolizer__new();
	const struct frame *f, *f2;
	GElf_Addr lo, hi, pc;
	Dwfl *dwfl;
	Dwfl_Module *m = report(&dwfl, "build/workloads/inlined");
	int n = 0, n2, found = 0;

	REQUIRE(m && sz);
	REQUIRE(sym_range(m, "outer_work", &lo, &hi) == 0);
	for (pc = lo; pc < hi && !found; pc++) {
		REQUIRE(symbolizer__lookup(sz, m, pc, true, &f, &n) == 0);
		if (n == 2 && !strcmp(f[0].func, "hot_inline")) {
			found = 1;
			CHECK_STR(f[1].func, "outer_work");
			CHECK(strstr(f[0].file, "inlined.c") != NULL);
			CHECK(strstr(f[1].file, "inlined.c") != NULL);
			CHECK(f[0].line > 0 && f[1].line > f[0].line);
			CHECK_STR(f[0].module, "build/workloads/inlined");
			CHECK_EQ(f[0].kind, FRAME_NATIVE);
			/* Cached: the same array comes back. */
			REQUIRE(symbolizer__lookup(sz, m, pc, true, &f2, &n2) == 0);
			CHECK(f2 == f && n2 == n);
		}
	}
	CHECK(found);
	/* A return address just after outer_work's first instruction names outer_work. */
	REQUIRE(symbolizer__lookup(sz, m, lo + 1, false, &f, &n) == 0);
	CHECK_STR(f[n - 1].func, "outer_work");
	symbolizer__free(sz);
	dwfl_end(dwfl);
}

TEST(cpp_names_demangled)
{
	struct symbolizer *sz = symbolizer__new();
	const struct frame *f;
	GElf_Addr lo, hi;
	Dwfl *dwfl;
	Dwfl_Module *m = report(&dwfl, "build/workloads/templ");
	int n;

	REQUIRE(m && sz);
	REQUIRE(sym_range(m, "_ZN2wl6WorkerIiE4spinEi", &lo, &hi) == 0);
	REQUIRE(symbolizer__lookup(sz, m, lo + 4, true, &f, &n) == 0);
	CHECK_STR(f[n - 1].func, "wl::Worker<int>::spin(int)");
	symbolizer__free(sz);
	dwfl_end(dwfl);
}

TEST(no_module_is_unknown)
{
	struct symbolizer *sz = symbolizer__new();
	const struct frame *f;
	int n;

	REQUIRE(symbolizer__lookup(sz, NULL, 0x1234, true, &f, &n) == 0);
	CHECK_EQ(n, 1);
	CHECK_STR(f[0].func, "[unknown]");
	symbolizer__free(sz);
}

TEST(demangle)
{
	char *s = symbolize_demangle("_ZNSt6vectorIiSaIiEE9push_backERKi");

	CHECK_STR(s, "std::vector<int, std::allocator<int> >::push_back(int const&)");
	free(s);
	CHECK(symbolize_demangle("main") == NULL);
	CHECK(symbolize_demangle("_Znot valid") == NULL);
	CHECK(symbolize_demangle(NULL) == NULL);
}

TEST_MAIN()
