// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native/kallsyms.h"
#include "base/util.h"

struct ksym {
	uint64_t addr;
	const char *name;
	const char *module;
};

struct kallsyms {
	struct ksym *syms; /* sorted by address */
	size_t nr;
	char *text; /* owns names */
};

static int cmp_ksym(const void *a, const void *b)
{
	const struct ksym *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

struct kallsyms *kallsyms__parse(const char *text)
{
	struct kallsyms *ks = calloc(1, sizeof(*ks));
	size_t cap = 0;
	char *line, *save = NULL, *p, *name, *mod;
	uint64_t addr;
	char type;

	if (!ks || !(ks->text = strdup(text))) {
		free(ks);
		errno = ENOMEM;
		return NULL;
	}
	for (line = strtok_r(ks->text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		addr = strtoull(line, &p, 16);
		if (p == line || *p != ' ')
			continue;
		type = p[1];
		/* Only code: text symbols (t/T) and weak ones (w/W). */
		if (!strchr("tTwW", type) || p[2] != ' ')
			continue;
		name = p + 3;
		mod = strchr(name, '\t');
		if (mod) {
			*mod++ = '\0';
			/* "[nfs]" */
		}
		if (grow_array(&ks->syms, &cap, ks->nr + 1, sizeof(*ks->syms))) {
			kallsyms__free(ks);
			errno = ENOMEM;
			return NULL;
		}
		ks->syms[ks->nr++] = (struct ksym){addr, name, mod ? mod : "[kernel]"};
	}
	qsort(ks->syms, ks->nr, sizeof(*ks->syms), cmp_ksym);
	return ks;
}

struct kallsyms *kallsyms__load(void)
{
	char *text = read_file("/proc/kallsyms", 0, NULL);
	struct kallsyms *ks;

	if (!text)
		return NULL;
	ks = kallsyms__parse(text);
	free(text);
	if (ks && ks->nr && ks->syms[ks->nr - 1].addr == 0) {
		/* Addresses hidden (kptr_restrict): useless. */
		kallsyms__free(ks);
		errno = EPERM;
		return NULL;
	}
	return ks;
}

void kallsyms__free(struct kallsyms *ks)
{
	if (!ks)
		return;
	free(ks->syms);
	free(ks->text);
	free(ks);
}

struct frame kallsyms__frame(const struct kallsyms *ks, uint64_t addr)
{
	struct frame f = {.kind = FRAME_KERNEL, .func = "[kernel]", .module = "[kernel]"};
	size_t lo = 0, hi = ks ? ks->nr : 0;

	/* The last symbol with addr <= @addr. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ks->syms[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0) {
		f.func = ks->syms[lo - 1].name;
		f.module = ks->syms[lo - 1].module;
	}
	return f;
}
