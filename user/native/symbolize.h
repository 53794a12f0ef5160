/* SPDX-License-Identifier: MIT */
/*
 * symbolize: native addresses to frames (function, inlined functions, source file and line,
 * module), with C++ names demangled. Results are cached per (module file, offset) across
 * processes, so a library shared by many targets is resolved once per address.
 */
#ifndef PROBING_SYMBOLIZE_H
#define PROBING_SYMBOLIZE_H

#include <stdbool.h>
#include <stdint.h>
#include <elfutils/libdwfl.h>

#include "base/frame.h"

struct symbolizer;

struct symbolizer *symbolizer__new(void);
/* Free the caches; frames handed out become invalid. NULL is a no-op. */
void symbolizer__free(struct symbolizer *sz);

/*
 * Frames for @pc in module @mod (NULL: the address is in no known module). @activation is
 * true for the interrupted frame; for return addresses (false) pc - 1 is looked up, so the
 * call instruction, not the one after it, is named. Set *@frames to a cached array of *@n
 * frames, innermost (inlined) first, valid for the life of the symbolizer.
 * Return 0 or -ENOMEM.
 */
int symbolizer__lookup(struct symbolizer *sz, Dwfl_Module *mod, uint64_t pc, bool activation,
		       const struct frame **frames, int *n);

/*
 * The ELF symbol of module @mod holding address @addr, as dwfl_module_addrinfo() names it
 * (NULL: none); in a module of many symbols from an index built at the first call (a binary
 * search, not libdw's walk over the whole table). Valid while @mod is.
 */
const char *symbolize_symbol(struct symbolizer *sz, Dwfl_Module *mod, uint64_t addr);

/* Demangle a C++ (Itanium ABI) name into a malloc'd string; NULL if @name is not mangled. */
char *symbolize_demangle(const char *name);

#endif
