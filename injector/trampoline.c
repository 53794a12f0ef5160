// SPDX-License-Identifier: MIT
/* The self-restoring trampoline of a borrowed call: see trampoline.h for what it does. */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>

#include "trampoline.h"

#define STR_(x) #x
#define STR(x)	STR_(x)

/* The kernel's internal restart codes (include/linux/errno.h), seen in rax at a stop. */
#define ERESTARTSYS	      512
#define ERESTARTNOINTR	      513
#define ERESTARTNOHAND	      514
#define ERESTART_RESTARTBLOCK 516

/* The system calls the code makes (x86-64 numbers, written literally in the assembly). */
_Static_assert(SYS_rt_sigaction == 13 && SYS_rt_sigprocmask == 14 && SYS_rt_sigpending == 127 &&
		       SYS_ppoll == 271,
	       "x86-64 system call numbers");

/*
 * Entry: rsp = the data block, 64-byte aligned (so that the call below enters fn with
 * rsp % 16 == 8, as the ABI wants). rbx holds the block throughout: it is callee-saved, so
 * fn and err_fn keep it. Nothing outside the block and the code is referenced, so the bytes
 * can be copied anywhere.
 *
 * The self-restore (after the park) writes only below TR_GPR once the thread's mask is back:
 * a signal delivered in the last instructions (rsp = TR_IRET) puts its frame below
 * rsp - 128 = TR_GPR - 8 and does not touch the registers still to be loaded.
 */
__asm__(".pushsection .text\n"
	".balign 64\n"
	".globl probing_tramp_begin\n"
	".hidden probing_tramp_begin\n"
	"probing_tramp_begin:\n"
	"	cld\n"
	"	mov %rsp, %rbx\n"
	/* rt_sigprocmask(SIG_SETMASK, &call_mask, NULL, 8): the injector did it already; this
	 * covers an injector killed between setting the registers and the mask. */
	"	mov $14, %eax\n"
	"	mov $2, %edi\n"
	"	lea " STR(TR_CALL_MASK) "(%rbx), %rsi\n"
					"	xor %edx, %edx\n"
					"	mov $8, %r10d\n"
					"	syscall\n"
					/* The call gets the ABI's default floating-point environment. */
					"	fninit\n"
					"	ldmxcsr " STR(TR_MXCSR) "(%rbx)\n"
									"	mov " STR(TR_ARG0) "(%rbx), %rdi\n"
												   "	mov " STR(TR_ARG1) "(%rbx), %rsi\n"
															   "	xor %eax, %eax\n"
															   "	call *" STR(TR_FN) "(%rbx)\n"
																		   "	mov %rax, " STR(TR_RESULT) "(%rbx)\n"
																						   "	test %rax, %rax\n"
																						   "	jnz 1f\n"
																						   "	mov " STR(TR_ERR_FN) "(%rbx), %rcx\n"
																									     "	test %rcx, %rcx\n"
																									     "	jz 1f\n"
																									     "	xor %eax, %eax\n"
																									     "	call *%rcx\n"
																									     "	mov %rax, " STR(TR_ERR_RESULT) "(%rbx)\n"
																													       "1:	mov " STR(TR_TOKEN) "(%rbx), %rax\n"
																																	    "	add $" STR(
																																		    TR_PARKED) ", %rax\n"
																																			       "	mov %rax, " STR(
																																				       TR_STATE) "(%rbx)\n"
																																						 /* Park: ppoll(NULL, 0, &park_ts, NULL, 8), every signal still blocked. The injector
	 * stops the thread here and restores it; ppoll never touches the restart block. */
																																						 ".globl probing_tramp_park\n"
																																						 ".hidden probing_tramp_park\n"
																																						 "probing_tramp_park:\n"
																																						 "	mov $271, %eax\n"
																																						 "	xor %edi, %edi\n"
																																						 "	xor %esi, %esi\n"
																																						 "	lea " STR(TR_PARK_TS) "(%rbx), %rdx\n"
																																									      "	xor %r10d, %r10d\n"
																																									      "	mov $8, %r8d\n"
																																									      "	syscall\n"
																																									      /* Nobody came: restore ourselves. */
																																									      ".globl probing_tramp_restore\n"
																																									      ".hidden probing_tramp_restore\n"
																																									      "probing_tramp_restore:\n"
																																									      "	mov " STR(
																																										      TR_TOKEN) "(%rbx), %rax\n"
																																												"	add $" STR(TR_RESTORING) ", %rax\n"
																																																 "	mov %rax, " STR(TR_STATE) "(%rbx)\n"
																																																				  "	cmpl $" STR(TR_KIND_NONE) ", " STR(
																																																					  TR_KIND) "(%rbx)\n"
																																																						   "	je 5f\n"
																																																						   /* An interrupted system call: will a signal that arrived meanwhile run a handler once
	 * the mask is back? The kernel delivers pending synchronous signals first, then the
	 * lowest number; ignored ones (SIG_IGN, SIG_DFL) are dropped without interrupting. */
																																																						   "	mov $127, %eax\n"
																																																						   "	lea " STR(
																																																							   TR_PENDING) "(%rbx), %rdi\n"
																																																								       "	mov $8, %esi\n"
																																																								       "	syscall\n"
																																																								       "	test %rax, %rax\n"
																																																								       "	jnz 5f\n"
																																																								       "	mov " STR(
																																																									       TR_PENDING) "(%rbx), %r12\n"
																																																											   "	mov " STR(TR_MASK) "(%rbx), %rax\n"
																																																														   "	not %rax\n"
																																																														   "	and %rax, %r12\n"
																																																														   "2:	test %r12, %r12\n"
																																																														   "	jz 5f\n"
																																																														   "	mov %r12, %rax\n"
																																																														   "	and $0x400004d8, %rax\n" /* SEGV BUS ILL TRAP FPE SYS: SYNCHRONOUS_MASK */
																																																														   "	jnz 3f\n"
																																																														   "	mov %r12, %rax\n"
																																																														   "3:	bsf %rax, %r13\n"
																																																														   "	btr %r13, %r12\n"
																																																														   "	lea 1(%r13), %edi\n"
																																																														   /* rt_sigaction(signo, NULL, &act, 8) */
																																																														   "	mov $13, %eax\n"
																																																														   "	xor %esi, %esi\n"
																																																														   "	lea " STR(TR_ACT) "(%rbx), %rdx\n"
																																																																	  "	mov $8, %r10d\n"
																																																																	  "	syscall\n"
																																																																	  "	test %rax, %rax\n"
																																																																	  "	jnz 2b\n"
																																																																	  "	cmpq $1, " STR(
																																																																		  TR_ACT) "(%rbx)\n"
																																																																			  "	jbe 2b\n"
																																																																			  /* That handler runs: decide as handle_signal() does. */
																																																																			  "	cmpl $" STR(TR_KIND_NOINTR) ", " STR(
																																																																				  TR_KIND) "(%rbx)\n"
																																																																					   "	je 5f\n"
																																																																					   "	cmpl $" STR(TR_KIND_RESTART) ", " STR(
																																																																						   TR_KIND) "(%rbx)\n"
																																																																							    "	jne 4f\n"
																																																																							    "	testl $0x10000000, " STR(TR_ACT) "+8(%rbx)\n" /* SA_RESTART */
																																																																												 "	jnz 5f\n"
																																																																												 "4:	movq $-4, " STR(
																																																																													 TR_GPR) "+80(%rbx)\n" /* rax = -EINTR, */
																																																																														 "	mov " STR(
																																																																															 TR_EINTR_RIP) "(%rbx), %rax\n"
																																																																																       "	mov %rax, " STR(
																																																																																	       TR_IRET) "(%rbx)\n" /* after the system call */
																																																																																			/* The extended state, then the mask, then every general register. */
																																																																																			"5:	lea " STR(TR_XSAVE) "(%rbx), %rcx\n"
																																																																																						    "	cmpl $0, " STR(
																																																																																							    TR_FXONLY) "(%rbx)\n"
																																																																																								       "	jne 6f\n"
																																																																																								       "	mov " STR(
																																																																																									       TR_RFBM) "(%rbx), %eax\n"
																																																																																											"	mov " STR(
																																																																																												TR_RFBM) "+4(%rbx), %edx\n"
																																																																																													 "	xrstor64 (%rcx)\n"
																																																																																													 "	jmp 7f\n"
																																																																																													 "6:	fxrstor64 (%rcx)\n"
																																																																																													 "7:	mov $14, %eax\n"
																																																																																													 "	mov $2, %edi\n"
																																																																																													 "	lea " STR(
																																																																																														 TR_MASK) "(%rbx), %rsi\n"
																																																																																															  "	xor %edx, %edx\n"
																																																																																															  "	mov $8, %r10d\n"
																																																																																															  "	syscall\n"
																																																																																															  "	mov " STR(
																																																																																																  TR_GPR) "+0(%rbx), %r15\n"
																																																																																																	  "	mov " STR(
																																																																																																		  TR_GPR) "+8(%rbx), %r14\n"
																																																																																																			  "	mov " STR(TR_GPR) "+16(%rbx), %r13\n"
																																																																																																						  "	mov " STR(TR_GPR) "+24(%rbx), %r12\n"
																																																																																																									  "	mov " STR(TR_GPR) "+32(%rbx), %rbp\n"
																																																																																																												  "	mov " STR(
																																																																																																													  TR_GPR) "+48(%rbx), %r11\n"
																																																																																																														  "	mov " STR(
																																																																																																															  TR_GPR) "+56(%rbx), %r10\n"
																																																																																																																  "	mov " STR(TR_GPR) "+64(%rbx), %r9\n"
																																																																																																																			  "	mov " STR(
																																																																																																																				  TR_GPR) "+72(%rbx), %r8\n"
																																																																																																																					  "	mov " STR(TR_GPR) "+80(%rbx), %rax\n"
																																																																																																																								  "	mov " STR(TR_GPR) "+88(%rbx), %rcx\n"
																																																																																																																											  "	mov " STR(TR_GPR) "+96(%rbx), %rdx\n"
																																																																																																																														  "	mov " STR(
																																																																																																																															  TR_GPR) "+104(%rbx), %rsi\n"
																																																																																																																																  "	mov " STR(
																																																																																																																																	  TR_GPR) "+112(%rbx), %rdi\n"
																																																																																																																																		  "	lea " STR(
																																																																																																																																			  TR_IRET) "(%rbx), %rsp\n"
																																																																																																																																				   "	mov " STR(
																																																																																																																																					   TR_GPR) "+40(%rbx), %rbx\n"
																																																																																																																																						   /* rip, cs, rflags, rsp, ss in one instruction: the interrupted context is back. */
																																																																																																																																						   "	iretq\n"
																																																																																																																																						   ".globl probing_tramp_end\n"
																																																																																																																																						   ".hidden probing_tramp_end\n"
																																																																																																																																						   "probing_tramp_end:\n"
																																																																																																																																						   ".popsection\n");

extern const unsigned char probing_tramp_begin[], probing_tramp_park[], probing_tramp_restore[],
	probing_tramp_end[];

_Static_assert(offsetof(struct tramp_data, token) == TR_TOKEN, "layout");
_Static_assert(offsetof(struct tramp_data, state) == TR_STATE, "layout");
_Static_assert(offsetof(struct tramp_data, fn) == TR_FN, "layout");
_Static_assert(offsetof(struct tramp_data, arg0) == TR_ARG0, "layout");
_Static_assert(offsetof(struct tramp_data, arg1) == TR_ARG1, "layout");
_Static_assert(offsetof(struct tramp_data, err_fn) == TR_ERR_FN, "layout");
_Static_assert(offsetof(struct tramp_data, result) == TR_RESULT, "layout");
_Static_assert(offsetof(struct tramp_data, err_result) == TR_ERR_RESULT, "layout");
_Static_assert(offsetof(struct tramp_data, call_mask) == TR_CALL_MASK, "layout");
_Static_assert(offsetof(struct tramp_data, mask) == TR_MASK, "layout");
_Static_assert(offsetof(struct tramp_data, park_ts) == TR_PARK_TS, "layout");
_Static_assert(offsetof(struct tramp_data, kind) == TR_KIND, "layout");
_Static_assert(offsetof(struct tramp_data, fxonly) == TR_FXONLY, "layout");
_Static_assert(offsetof(struct tramp_data, rfbm) == TR_RFBM, "layout");
_Static_assert(offsetof(struct tramp_data, mxcsr) == TR_MXCSR, "layout");
_Static_assert(offsetof(struct tramp_data, eintr_rip) == TR_EINTR_RIP, "layout");
_Static_assert(offsetof(struct tramp_data, pending) == TR_PENDING, "layout");
_Static_assert(offsetof(struct tramp_data, act) == TR_ACT, "layout");
_Static_assert(offsetof(struct tramp_data, gpr) == TR_GPR, "layout");
_Static_assert(offsetof(struct tramp_data, iret) == TR_IRET, "layout");
_Static_assert(sizeof(struct tramp_data) == TR_XSAVE && TR_XSAVE % 64 == 0, "layout");

void tramp__code(struct tramp_code *c)
{
	c->bytes = probing_tramp_begin;
	c->len = probing_tramp_end - probing_tramp_begin;
	c->park = probing_tramp_park - probing_tramp_begin;
	c->restore = probing_tramp_restore - probing_tramp_begin;
}

void tramp__set_regs(struct tramp_data *d, const struct user_regs_struct *r, bool eintr_call)
{
	struct user_regs_struct x = *r;
	long code = -(long)r->rax;

	d->kind = TR_KIND_NONE;
	d->eintr_rip = r->rip;
	/* arch_do_signal_or_restart(): a system call interrupted with a restart code resumes
	 * at its syscall instruction (2 bytes back) with its number in rax again, or with
	 * restart_syscall for -ERESTART_RESTARTBLOCK (which continues from the saved restart
	 * block: a nanosleep keeps its remaining time). */
	if ((long)r->orig_rax >= 0) {
		switch (code) {
		case ERESTARTNOINTR:
			d->kind = TR_KIND_NOINTR;
			break;
		case ERESTARTSYS:
			d->kind = TR_KIND_RESTART;
			break;
		case ERESTARTNOHAND:
		case ERESTART_RESTARTBLOCK:
			d->kind = TR_KIND_HANDLER;
			break;
		case EINTR:
			/* Calls that return EINTR when stopped (epoll_wait...): restarted by hand
			 * unless a handler runs (then the EINTR is genuine). */
			if (eintr_call)
				d->kind = TR_KIND_HANDLER;
			break;
		}
	}
	if (d->kind != TR_KIND_NONE) {
		x.rax = code == ERESTART_RESTARTBLOCK ? SYS_restart_syscall : r->orig_rax;
		x.rip -= 2;
	}
	d->gpr[0] = x.r15;
	d->gpr[1] = x.r14;
	d->gpr[2] = x.r13;
	d->gpr[3] = x.r12;
	d->gpr[4] = x.rbp;
	d->gpr[5] = x.rbx;
	d->gpr[6] = x.r11;
	d->gpr[7] = x.r10;
	d->gpr[8] = x.r9;
	d->gpr[9] = x.r8;
	d->gpr[10] = x.rax;
	d->gpr[11] = x.rcx;
	d->gpr[12] = x.rdx;
	d->gpr[13] = x.rsi;
	d->gpr[14] = x.rdi;
	d->iret[0] = x.rip;
	d->iret[1] = x.cs;
	d->iret[2] = x.eflags;
	d->iret[3] = x.rsp;
	d->iret[4] = x.ss;
}
