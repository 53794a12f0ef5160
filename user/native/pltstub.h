/* SPDX-License-Identifier: MIT */
/*
 * pltstub: names for the PLT stubs of an ELF file ("memcpy@plt"), which no symbol table
 * holds, synthesized as objdump and perf do: each stub's indirect jump goes through a GOT
 * slot, and the dynamic relocation of that slot names the function. x86-64 only (elsewhere
 * every lookup answers NULL). The file is untrusted: every offset and index is checked.
 */
#ifndef PROBING_PLTSTUB_H
#define PROBING_PLTSTUB_H

#include <stdint.h>
#include <libelf.h>

struct pltstubs;

/*
 * Read the stubs of @elf (.plt, .plt.sec and .plt.got against .rela.plt and .rela.dyn).
 * Return the table (empty for a file without stubs, or one that cannot be read), or NULL
 * with errno ENOMEM. The table keeps no reference to @elf.
 */
struct pltstubs *pltstubs__new(Elf *elf);

/*
 * The name ("func@plt") of the stub whose bytes hold @vaddr (an address of the ELF file,
 * before any load bias), or NULL when no named stub does (PLT0, the resolver's entry, is
 * unnamed). Valid for the table's life.
 */
const char *pltstubs__name(const struct pltstubs *ps, uint64_t vaddr);

/* The number of named stubs. */
size_t pltstubs__count(const struct pltstubs *ps);

/* Free the table; NULL is a no-op. */
void pltstubs__free(struct pltstubs *ps);

#endif
