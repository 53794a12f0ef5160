// SPDX-License-Identifier: MIT
/* Symbolization against the real workload binaries in build/workloads (built -O2 -g). */
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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

/*
 * symbolize_symbol() names addresses as libdw's dwfl_module_addrinfo() does in @path: at the
 * start, middle and last byte of about 400 of its function symbols and at 4 addresses just
 * after each (often the next function, or a gap between functions: libdw's answers there are
 * kept per gap, so several addresses of one gap are asked), and in its executable sections
 * from their start (.init, the PLT: below every symbol). The number of addresses
 * checked, -1 if the file is not there, -2 at the first disagreement.
 */
static int check_symbols_like_libdw(const char *path)
{
	struct symbolizer *sz = symbolizer__new();
	const char *want, *got;
	GElf_Sym sym, s2;
	GElf_Addr addr, pcs[7];
	GElf_Off off;
	Dwfl *dwfl;
	Dwfl_Module *m;
	int i, j, n, step, checked = 0;

	if (access(path, R_OK)) {
		symbolizer__free(sz);
		return -1;
	}
	if (!sz || !(m = report(&dwfl, path)))
		return -3;
	n = dwfl_module_getsymtab(m);
	step = n / 400 > 1 ? n / 400 : 1;
	for (i = 1; i < n; i += step) {
		if (!dwfl_module_getsym_info(m, i, &sym, &addr, NULL, NULL, NULL) ||
		    GELF_ST_TYPE(sym.st_info) != STT_FUNC || !sym.st_size)
			continue;
		pcs[0] = addr;
		pcs[1] = addr + sym.st_size / 2;
		pcs[2] = addr + sym.st_size - 1;
		pcs[3] = addr + sym.st_size; /* often the next function, or a gap */
		pcs[4] = addr + sym.st_size + 1;
		pcs[5] = addr + sym.st_size + 5;
		pcs[6] = addr + sym.st_size + 14;
		for (j = 0; j < 7; j++) {
			want = dwfl_module_addrinfo(m, pcs[j], &off, &s2, NULL, NULL, NULL);
			got = symbolize_symbol(sz, m, pcs[j]);
			if (!want || !got ? want != got : strcmp(want, got)) {
				fprintf(stderr, "%s at %#llx: libdw %s, index %s\n", path,
					(unsigned long long)pcs[j], want ?: "NULL", got ?: "NULL");
				checked = -2;
				goto out;
			}
			checked++;
		}
	}
	/* Addresses below the first symbol and in sections without any: .init, the PLT (a
	 * sample in a PLT stub), .fini; every 16th byte of the first 1 KiB, and the last one. */
	if (checked >= 0) {
		GElf_Addr bias;
		Elf *elf = dwfl_module_getelf(m, &bias);
		Elf_Scn *scn = NULL;
		GElf_Shdr sh;
		GElf_Addr a;

		while (elf && (scn = elf_nextscn(elf, scn))) {
			if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_EXECINSTR) ||
			    !sh.sh_size)
				continue;
			for (a = 0; a <= sh.sh_size && a <= 1024; a += 16) {
				addr = bias + sh.sh_addr + (a < sh.sh_size ? a : sh.sh_size - 1);
				want = dwfl_module_addrinfo(m, addr, &off, &s2, NULL, NULL, NULL);
				got = symbolize_symbol(sz, m, addr);
				if (!want || !got ? want != got : strcmp(want, got)) {
					fprintf(stderr, "%s at %#llx: libdw %s, index %s\n", path,
						(unsigned long long)addr, want ?: "NULL",
						got ?: "NULL");
					checked = -2;
					goto out;
				}
				checked++;
			}
		}
	}
out:
	dwfl_end(dwfl);
	symbolizer__free(sz);
	return checked;
}

/*
 * The symbol index (modules of 1,000 symbols or more) against libdw, in the large libraries
 * of Debian's python3-torch (libtorch_cpu: 35,000 dynamic symbols, 2.3 ms a libdw lookup)
 * and smaller ones (libstdc++, libgloo, libc, libm).
 */
TEST(symbol_index_agrees_with_libdw)
{
	REQUIRE(check_symbols_like_libdw("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13") >
		1000); /* make test installs python3-torch */
	REQUIRE(check_symbols_like_libdw("/usr/lib/x86_64-linux-gnu/libtorch_python.so.1.13") >
		500);
	REQUIRE(check_symbols_like_libdw("/usr/lib/x86_64-linux-gnu/libstdc++.so.6") > 500);
	REQUIRE(check_symbols_like_libdw("/usr/lib/libgloo.so.0.5.0") > 300);
	/* Sizeless symbols (assembly labels) in their text, which libdw names gaps by. */
	REQUIRE(check_symbols_like_libdw("/usr/lib/x86_64-linux-gnu/libc.so.6") > 500);
	REQUIRE(check_symbols_like_libdw("/usr/lib/x86_64-linux-gnu/libm.so.6") > 300);
}
