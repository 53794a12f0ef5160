/* SPDX-License-Identifier: MIT */
/*
 * pylines: CPython line-number tables, decoded without the interpreter. Pure functions over
 * the raw bytes of a code object's table, so they can be tested against the interpreter's own
 * answers (PyCode_Addr2Line) and used on tables copied out of another process.
 *
 * Every decoder takes @addr, a *byte* offset into the code (2 * the instruction index in
 * 16-bit code units, what PyCode_Addr2Line takes), and returns the line number, or -1 where
 * the table says the instruction has no line (3.10+). A negative @addr means "before the
 * first instruction" and yields @firstlineno, as in CPython.
 */
#ifndef PROBING_PYLINES_H
#define PROBING_PYLINES_H

#include <stddef.h>
#include <stdint.h>

/* 3.8, 3.9: co_lnotab, (byte increment, signed line increment) pairs. */
int pylines_lnotab(const uint8_t *tab, size_t len, int firstlineno, int addr);

/* 3.10: co_linetable, (byte length, signed line delta; -128 = no line) pairs (PEP 626). */
int pylines_linetable310(const uint8_t *tab, size_t len, int firstlineno, int addr);

/* 3.11+: the location table (Objects/locations.md): variable-length entries, each covering
 * 1-8 code units, with a line delta in one of five encodings. */
int pylines_locations(const uint8_t *tab, size_t len, int firstlineno, int addr);

/*
 * Dispatch on the version (PY_VER(3, 8) ..., pyoffsets.h): the line of instruction index @lasti (code
 * units; -1 before the first instruction). @tab is co_lnotab (3.8, 3.9) or co_linetable.
 */
int pylines_line(unsigned int version, const uint8_t *tab, size_t len, int firstlineno, int lasti);

/*
 * Where the unconditional jump at instruction index @lasti goes, read from @code: the first
 * @n code units (2 bytes each) of the code as the process holds it (co_code up to 3.10,
 * co_code_adaptive since: quickened, maybe instrumented), 3.10+. The code is decoded from
 * its start (pyopcodes.h), so an EXTENDED_ARG prefix is told from an inline cache entry.
 * Return the target's instruction index, or -1: not an unconditional jump, past @n or
 * inside an instruction, or code that cannot be decoded up to it (3.12+ line monitoring).
 */
int pylines_jump_target(unsigned int version, const uint8_t *code, size_t n, int lasti);

/*
 * The line a frame at instruction @lasti resumes at when pylines_line says the instruction
 * has none: the loop back-edge (JUMP_ABSOLUTE in 3.10, JUMP_BACKWARD in 3.11) after an if
 * statement has no line, and it is where a thread waits for the GIL. For an unconditional
 * jump that is the line of its target (following a few jumps without lines). Return it, or
 * -1 (not a jump: unknown). @code and @n as for pylines_jump_target.
 */
int pylines_jump_line(unsigned int version, const uint8_t *tab, size_t len, int firstlineno,
		      const uint8_t *code, size_t n, int lasti);

#endif
