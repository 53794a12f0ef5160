/* SPDX-License-Identifier: MIT */
/*
 * pyrepr: Python's repr() of simple values, computed in C from their contents (read out of
 * another process by pyproc): float, int of any size, str and bytes, with the escaping
 * rules of CPython 3.8-3.13 (Objects/unicodeobject.c unicode_repr, Objects/bytesobject.c
 * PyBytes_Repr, Python/pystrtod.c format_float_short with mode 'r',
 * Objects/longobject.c long_to_decimal_string).
 *
 * Long values are cut so that the result has at most @max_repr characters (code points):
 *   str, bytes   the repr of the longest prefix that fits, then "...": 'abcdef'...
 *   int          the leading digits, then "...(N digits)": 123456...(5000 digits)
 * Anything below PYREPR_MIN is taken as PYREPR_MIN.
 */
#ifndef PROBING_PYREPR_H
#define PROBING_PYREPR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

#define PYREPR_MIN 16

/* The most 30-bit digits of an int pyrepr_int converts (about 18000 decimal digits). */
#define PYREPR_INT_MAX_DIGITS 2000

/* repr(float): the shortest string that reads back to @v, laid out as Python does
 * ("0.1", "1e+16", "1e-05", "-0.0", "inf", "nan"). Return 0 or -ENOMEM. */
int pyrepr_float(struct strbuf *sb, double v);

/*
 * repr(int) of the int whose magnitude has @ndigits 30-bit digits @digits (least significant
 * first, as CPython stores them) and sign @negative. At most PYREPR_INT_MAX_DIGITS digits:
 * -E2BIG beyond. Return 0, -E2BIG or -ENOMEM.
 */
int pyrepr_int(struct strbuf *sb, const uint32_t *digits, size_t ndigits, bool negative,
	       size_t max_repr);

/*
 * repr(str) of a str of @total code points whose first @n are @cps (@n >= min(@total,
 * @max_repr) is enough to produce the cut repr). Return 0 or -ENOMEM.
 */
int pyrepr_str(struct strbuf *sb, const uint32_t *cps, size_t n, size_t total, size_t max_repr);

/* repr(bytes), likewise: @n of @total bytes are in @b. Return 0 or -ENOMEM. */
int pyrepr_bytes(struct strbuf *sb, const uint8_t *b, size_t n, size_t total, size_t max_repr);

/* Py_UNICODE_ISPRINTABLE(@cp), after the generated table (user/python/pyrepr_unicode.c). */
bool pyrepr_printable(uint32_t cp);

/* pyrepr_unicode.c (generated): non-printable code points, inclusive ranges, sorted. */
extern const uint32_t pyrepr_nonprintable[][2];
extern const size_t pyrepr_nonprintable_nr;

#endif
