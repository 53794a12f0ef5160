// SPDX-License-Identifier: MIT
#include <dwarf.h>
#include <stdlib.h>

#include "bpf/sampler.h"
#include "native/cfirule.h"

bool cfi_frame_cfa(Dwarf_Frame *frame, bool *rbp, int32_t *off)
{
	Dwarf_Op *ops;
	size_t nops;
	uint64_t reg;
	int64_t o;

	/* libdw gives "rsp + N" as DW_OP_bregx or DW_OP_bregN. */
	if (dwarf_frame_cfa(frame, &ops, &nops) || nops != 1)
		return false;
	if (ops[0].atom == DW_OP_bregx) {
		reg = ops[0].number;
		o = (int64_t)ops[0].number2;
	} else if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
		reg = ops[0].atom - DW_OP_breg0;
		o = (int64_t)ops[0].number;
	} else {
		return false;
	}
	if ((reg != DWREG_RSP && reg != DWREG_RBP) || o < INT32_MIN || o > INT32_MAX)
		return false;
	*rbp = reg == DWREG_RBP;
	*off = (int32_t)o;
	return true;
}

enum cfi_reg_how cfi_frame_reg(Dwarf_Frame *frame, int reg, int32_t *off)
{
	Dwarf_Op ops_mem[3], *ops;
	size_t nops;
	int64_t o = 0;

	if (dwarf_frame_register(frame, reg, ops_mem, &ops, &nops))
		return CFI_REG_OTHER;
	if (!nops)
		return ops == ops_mem ? CFI_REG_UNDEFINED
		       : ops == NULL  ? CFI_REG_SAME
				      : CFI_REG_OTHER;
	if (ops[0].atom != DW_OP_call_frame_cfa)
		return CFI_REG_OTHER;
	if (nops == 2 && ops[1].atom == DW_OP_stack_value)
		return CFI_REG_IS_CFA; /* val_offset(0) */
	if (nops == 2 && ops[1].atom == DW_OP_plus_uconst)
		o = (int64_t)ops[1].number;
	else if (nops != 1)
		return CFI_REG_OTHER;
	if (o < INT32_MIN || o > INT32_MAX)
		return CFI_REG_OTHER;
	*off = (int32_t)o;
	return CFI_REG_AT;
}

void cfi_rule__read(Dwfl_Module *mod, uint64_t pc, struct cfi_rule *out)
{
	Dwarf_Frame *frame = NULL;
	Dwarf_CFI *cfi;
	Dwarf_Addr bias;
	bool signal = false;
	int32_t unused;
	int ra;

	*out = (struct cfi_rule){0};
	cfi = mod ? dwfl_module_eh_cfi(mod, &bias) : NULL;
	if (!cfi || dwarf_cfi_addrframe(cfi, pc - bias, &frame))
		return; /* libdwfl goes on to .debug_frame, then frame pointers */
	ra = dwarf_frame_info(frame, NULL, NULL, &signal);
	if (ra != DWREG_RIP || signal || !cfi_frame_cfa(frame, &out->cfa_rbp, &out->cfa_off))
		goto out;
	switch (cfi_frame_reg(frame, DWREG_RIP, &out->ra_off)) {
	case CFI_REG_UNDEFINED:
		out->outermost = true;
		break;
	case CFI_REG_AT:
		break;
	default:
		goto out;
	}
	switch (cfi_frame_reg(frame, DWREG_RBP, &out->rbp_off)) {
	case CFI_REG_SAME:
		out->rbp = CFI_RBP_SAME;
		break;
	case CFI_REG_AT:
		out->rbp = CFI_RBP_AT;
		break;
	case CFI_REG_UNDEFINED:
		out->rbp = CFI_RBP_UNDEFINED;
		break;
	default:
		goto out;
	}
	out->simple = cfi_frame_reg(frame, DWREG_RSP, &unused) == CFI_REG_IS_CFA;
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
