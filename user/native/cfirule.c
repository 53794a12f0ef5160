// SPDX-License-Identifier: MIT
#include <dwarf.h>
#include <stdlib.h>

#include "bpf/sampler.h"
#include "native/cfirule.h"

/* The CFA rule "rsp + N" or "rbp + N" (libdw gives it as DW_OP_bregx or DW_OP_bregN). */
static bool cfa_of(Dwarf_Frame *frame, struct cfi_rule *r)
{
	Dwarf_Op *ops;
	size_t nops;
	uint64_t reg;
	int64_t off;

	if (dwarf_frame_cfa(frame, &ops, &nops) || nops != 1)
		return false;
	if (ops[0].atom == DW_OP_bregx) {
		reg = ops[0].number;
		off = (int64_t)ops[0].number2;
	} else if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
		reg = ops[0].atom - DW_OP_breg0;
		off = (int64_t)ops[0].number;
	} else {
		return false;
	}
	if ((reg != DWREG_RSP && reg != DWREG_RBP) || off < INT32_MIN || off > INT32_MAX)
		return false;
	r->cfa_rbp = reg == DWREG_RBP;
	r->cfa_off = (int32_t)off;
	return true;
}

enum reg_how { REG_OTHER, REG_UNDEFINED, REG_SAME, REG_AT, REG_IS_CFA };

/* How register @reg of the caller is found: REG_AT with *@off (saved at CFA + off), ... */
static enum reg_how reg_of(Dwarf_Frame *frame, int reg, int32_t *off)
{
	Dwarf_Op ops_mem[3], *ops;
	size_t nops;
	int64_t o = 0;

	if (dwarf_frame_register(frame, reg, ops_mem, &ops, &nops))
		return REG_OTHER;
	if (!nops)
		return ops == ops_mem ? REG_UNDEFINED : ops == NULL ? REG_SAME : REG_OTHER;
	if (ops[0].atom != DW_OP_call_frame_cfa)
		return REG_OTHER;
	if (nops == 2 && ops[1].atom == DW_OP_stack_value)
		return REG_IS_CFA; /* val_offset(0) */
	if (nops == 2 && ops[1].atom == DW_OP_plus_uconst)
		o = (int64_t)ops[1].number;
	else if (nops != 1)
		return REG_OTHER;
	if (o < INT32_MIN || o > INT32_MAX)
		return REG_OTHER;
	*off = (int32_t)o;
	return REG_AT;
}

void cfi_rule__read(Dwfl_Module *mod, uint64_t pc, struct cfi_rule *out)
{
	Dwarf_Frame *frame = NULL;
	Dwarf_CFI *cfi;
	Dwarf_Addr bias;
	bool signal = false;
	int ra;

	*out = (struct cfi_rule){0};
	cfi = mod ? dwfl_module_eh_cfi(mod, &bias) : NULL;
	if (!cfi || dwarf_cfi_addrframe(cfi, pc - bias, &frame))
		return; /* libdwfl goes on to .debug_frame, then frame pointers */
	ra = dwarf_frame_info(frame, NULL, NULL, &signal);
	if (ra != DWREG_RIP || signal || !cfa_of(frame, out))
		goto out;
	switch (reg_of(frame, DWREG_RIP, &out->ra_off)) {
	case REG_UNDEFINED:
		out->outermost = true;
		break;
	case REG_AT:
		break;
	default:
		goto out;
	}
	switch (reg_of(frame, DWREG_RBP, &out->rbp_off)) {
	case REG_SAME:
		out->rbp = CFI_RBP_SAME;
		break;
	case REG_AT:
		out->rbp = CFI_RBP_AT;
		break;
	case REG_UNDEFINED:
		out->rbp = CFI_RBP_UNDEFINED;
		break;
	default:
		goto out;
	}
	{
		int32_t unused;

		if (reg_of(frame, DWREG_RSP, &unused) != REG_IS_CFA)
			goto out;
	}
	out->simple = true;
out:
	free(frame);
}

/* Bits: 0-1 kind (1 not simple, 2 simple), 2 outermost, 3 cfa_rbp, 4-5 rbp, 6-29 cfa_off
 * (24 bits, signed), 30-45 ra_off (16), 46-61 rbp_off (16). */
#define FITS(v, bits) ((v) >= -(1 << ((bits)-1)) && (v) < (1 << ((bits)-1)))

uint64_t cfi_rule__pack(const struct cfi_rule *r)
{
	if (!r->simple || !FITS(r->cfa_off, 24) || !FITS(r->ra_off, 16) || !FITS(r->rbp_off, 16))
		return 1;
	return 2 | (uint64_t)r->outermost << 2 | (uint64_t)r->cfa_rbp << 3 |
	       (uint64_t)(r->rbp & 3) << 4 | ((uint64_t)(uint32_t)r->cfa_off & 0xffffff) << 6 |
	       ((uint64_t)(uint16_t)r->ra_off) << 30 | ((uint64_t)(uint16_t)r->rbp_off) << 46;
}

/* The low @bits of @v as a signed number. */
static int32_t sext(uint64_t v, int bits)
{
	return (int32_t)((int64_t)(v << (64 - bits)) >> (64 - bits));
}

void cfi_rule__unpack(uint64_t v, struct cfi_rule *r)
{
	*r = (struct cfi_rule){0};
	if ((v & 3) != 2)
		return;
	r->simple = true;
	r->outermost = v >> 2 & 1;
	r->cfa_rbp = v >> 3 & 1;
	r->rbp = v >> 4 & 3;
	r->cfa_off = sext(v >> 6, 24);
	r->ra_off = sext(v >> 30, 16);
	r->rbp_off = sext(v >> 46, 16);
}
