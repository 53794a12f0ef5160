// SPDX-License-Identifier: MIT
/*
 * cfirule against the real fpret workload (build/workloads/fpret, built with frame pointers):
 * the rules at instructions whose effect on the stack is known from their bytes, read from
 * the binary itself: a function's entry, past its `push %rbp`, past `mov %rsp,%rbp`, and its
 * `ret` after `pop %rbp` or `leave`; _start, the outermost frame; packing.
 */
#include <gelf.h>
#include <string.h>
#include <elfutils/libdwfl.h>

#include "bpf/sampler.h"
#include "native/cfirule.h"
#include "test.h"

static char *debuginfo_path;
static const Dwfl_Callbacks callbacks = {
	.find_elf = dwfl_build_id_find_elf,
	.find_debuginfo = dwfl_standard_find_debuginfo,
	.debuginfo_path = &debuginfo_path,
};

static Dwfl *dwfl;
static Dwfl_Module *mod;

static Dwfl_Module *fpret(void)
{
	if (!mod) {
		dwfl = dwfl_begin(&callbacks);
		dwfl_report_begin(dwfl);
		mod = dwfl_report_elf(dwfl, "fpret", "build/workloads/fpret", -1, 0x100000, true);
		dwfl_report_end(dwfl, NULL, NULL);
	}
	return mod;
}

/* The code of symbol @name: its address, size and bytes. */
static const uint8_t *code_of(const char *name, GElf_Addr *lo, size_t *size)
{
	int i, n = dwfl_module_getsymtab(fpret());
	GElf_Addr addr, off;
	GElf_Sym sym;

	for (i = 0; i < n; i++) {
		const char *s = dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);
		Dwarf_Addr bias;
		Elf_Data *d;
		Elf_Scn *scn;

		if (!s || strcmp(s, name))
			continue;
		off = addr;
		scn = dwfl_module_address_section(mod, &off, &bias);
		d = scn ? elf_getdata(scn, NULL) : NULL;
		if (!d || off + sym.st_size > d->d_size)
			return NULL;
		*lo = addr;
		*size = sym.st_size;
		return (const uint8_t *)d->d_buf + off;
	}
	return NULL;
}

/* Past an endbr64, if the function starts with one. */
static size_t past_endbr(const uint8_t *c)
{
	static const uint8_t endbr64[] = {0xf3, 0x0f, 0x1e, 0xfa};

	return memcmp(c, endbr64, 4) ? 0 : 4;
}

#define CHECK_RULE(r, rbp_base, off, how)            \
	do {                                         \
		CHECK((r).simple && !(r).outermost); \
		CHECK_EQ((r).cfa_rbp, rbp_base);     \
		CHECK_EQ((r).cfa_off, off);          \
		CHECK_EQ((r).ra_off, -8);            \
		CHECK_EQ((r).rbp, how);              \
	} while (0)

TEST(frame_pointer_prologue_and_pop_epilogue)
{
	struct cfi_rule r;
	GElf_Addr lo;
	size_t size, e;
	const uint8_t *c = code_of("fp_pop", &lo, &size);

	REQUIRE(c && size > 8);
	e = past_endbr(c);
	/* push %rbp; mov %rsp,%rbp ... pop %rbp; ret */
	REQUIRE(c[e] == 0x55 && !memcmp(c + e + 1, "\x48\x89\xe5", 3));
	REQUIRE(c[size - 1] == 0xc3 && c[size - 2] == 0x5d);
	cfi_rule__read(mod, lo + e, &r);
	CHECK_RULE(r, false, 8, CFI_RBP_SAME);
	cfi_rule__read(mod, lo + e + 1, &r);
	CHECK_RULE(r, false, 16, CFI_RBP_AT);
	CHECK_EQ(r.rbp_off, -16);
	cfi_rule__read(mod, lo + e + 4, &r);
	CHECK_RULE(r, true, 16, CFI_RBP_AT);
	CHECK_EQ(r.rbp_off, -16);
	/* At the ret: the CFA is rsp + 8 again; rbp's rule still names its popped slot. */
	cfi_rule__read(mod, lo + size - 1, &r);
	CHECK_RULE(r, false, 8, CFI_RBP_AT);
	CHECK_EQ(r.rbp_off, -16);
}

TEST(leave_epilogue)
{
	struct cfi_rule r;
	GElf_Addr lo;
	size_t size, i;
	const uint8_t *c = code_of("fp_leave", &lo, &size);

	REQUIRE(c && size > 8 && c[size - 1] == 0xc3);
	for (i = size - 1; i > 0 && c[i] != 0xc9; i--)
		;
	REQUIRE(i > 0); /* leave */
	cfi_rule__read(mod, lo + i, &r);
	CHECK_RULE(r, true, 16, CFI_RBP_AT);
	cfi_rule__read(mod, lo + i + 1, &r);
	CHECK_RULE(r, false, 8, CFI_RBP_AT);
	cfi_rule__read(mod, lo + size - 1, &r);
	CHECK_RULE(r, false, 8, CFI_RBP_AT);
}

TEST(start_is_the_outermost_frame)
{
	struct cfi_rule r;
	GElf_Addr lo;
	size_t size;

	REQUIRE(code_of("_start", &lo, &size));
	cfi_rule__read(mod, lo + past_endbr(code_of("_start", &lo, &size)), &r);
	CHECK(r.simple && r.outermost);
}

TEST(no_module_or_no_entry_is_not_simple)
{
	struct cfi_rule r;

	cfi_rule__read(NULL, 0x401000, &r);
	CHECK(!r.simple);
	cfi_rule__read(fpret(), 0x100000, &r); /* the ELF header: no .eh_frame entry */
	CHECK(!r.simple);
}

static bool same_rule(const struct cfi_rule *a, const struct cfi_rule *b)
{
	return a->simple == b->simple && a->outermost == b->outermost && a->cfa_rbp == b->cfa_rbp &&
	       a->rbp == b->rbp && a->cfa_off == b->cfa_off && a->ra_off == b->ra_off &&
	       a->rbp_off == b->rbp_off;
}

TEST(packed_and_unpacked)
{
	struct cfi_rule a = {.simple = true,
			     .cfa_rbp = true,
			     .rbp = CFI_RBP_AT,
			     .cfa_off = -4096,
			     .ra_off = -8,
			     .rbp_off = -16},
			b = {.simple = true,
			     .outermost = true,
			     .cfa_off = (1 << 23) - 1,
			     .ra_off = 32767,
			     .rbp = CFI_RBP_UNDEFINED,
			     .rbp_off = -32768},
			r;

	CHECK(cfi_rule__pack(&a) != 0);
	cfi_rule__unpack(cfi_rule__pack(&a), &r);
	CHECK(same_rule(&a, &r));
	cfi_rule__unpack(cfi_rule__pack(&b), &r);
	CHECK(same_rule(&b, &r));
	/* Offsets that do not fit: not simple (libdwfl unwinds it). */
	b.cfa_off = 1 << 23;
	cfi_rule__unpack(cfi_rule__pack(&b), &r);
	CHECK(!r.simple);
	b.cfa_off = 8;
	b.ra_off = 40000;
	cfi_rule__unpack(cfi_rule__pack(&b), &r);
	CHECK(!r.simple);
	a.simple = false;
	CHECK(cfi_rule__pack(&a) != 0);
	cfi_rule__unpack(cfi_rule__pack(&a), &r);
	CHECK(!r.simple);
}

TEST_MAIN()
