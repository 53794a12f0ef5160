/* SPDX-License-Identifier: MIT */
/*
 * cfirule: the call-frame rule of one code address, read from a module's .eh_frame through
 * libdw, in the one shape that most x86_64 code has and that a frame can be unwound by in a
 * few loads: the CFA is rsp or rbp plus an offset, the return address is saved at an offset
 * from the CFA (or undefined: the outermost frame), the caller's rsp is the CFA, and rbp is
 * kept, saved at an offset from the CFA, or undefined. Anything else (a CFA expression, a
 * register rule of another kind, a signal frame, an address without an .eh_frame entry) is
 * "not simple": the caller unwinds that stack with libdwfl. Packed into 64 bits to be cached.
 */
#ifndef PROBING_CFIRULE_H
#define PROBING_CFIRULE_H

#include <stdbool.h>
#include <stdint.h>
#include <elfutils/libdwfl.h>

enum cfi_rbp {
	CFI_RBP_SAME,	   /* the caller's rbp is this frame's */
	CFI_RBP_AT,	   /* saved at CFA + rbp_off */
	CFI_RBP_UNDEFINED, /* unknown in the caller */
};

struct cfi_rule {
	bool simple;	/* false: none of the rest holds, unwind with libdwfl */
	bool outermost; /* the return address is undefined: no caller */
	bool cfa_rbp;	/* the CFA is rbp + cfa_off (false: rsp + cfa_off) */
	uint8_t rbp;	/* enum cfi_rbp */
	int32_t cfa_off;
	int32_t ra_off; /* the return address is at CFA + ra_off (unless outermost) */
	int32_t rbp_off;
};

/* How a register of the caller is found in a frame's rule (cfi_frame_reg). */
enum cfi_reg_how {
	CFI_REG_OTHER,	   /* a rule of another kind (an expression, another register) */
	CFI_REG_UNDEFINED, /* undefined */
	CFI_REG_SAME,	   /* the same value */
	CFI_REG_AT,	   /* saved at CFA + offset: offset(N) */
	CFI_REG_IS_CFA,	   /* the CFA itself: val_offset(0), the caller's rsp */
};

/* How register @reg (DWARF numbering) of the caller is found by @frame; *@off for CFI_REG_AT. */
enum cfi_reg_how cfi_frame_reg(Dwarf_Frame *frame, int reg, int32_t *off);

/*
 * Whether @frame's CFA is rsp or rbp plus an offset that fits 32 bits: then *@rbp (the base is
 * rbp) and *@off.
 */
bool cfi_frame_cfa(Dwarf_Frame *frame, bool *rbp, int32_t *off);

/*
 * The rule for code address @pc (exact: a return address already less one) of module @mod,
 * as libdwfl would unwind it: from the module's .eh_frame, which it tries first and keeps to
 * once it has an entry for @pc. Into *@out; out->simple false when the rule has another shape
 * or @mod is NULL. Never fails otherwise.
 */
void cfi_rule__read(Dwfl_Module *mod, uint64_t pc, struct cfi_rule *out);

/* @r in 64 bits, never 0; a rule whose offsets do not fit packs as not simple. */
uint64_t cfi_rule__pack(const struct cfi_rule *r);

/* The rule cfi_rule__pack packed into @v (not 0). */
void cfi_rule__unpack(uint64_t v, struct cfi_rule *r);

#endif
