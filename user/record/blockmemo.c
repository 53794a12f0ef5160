// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "record/blockmemo.h"

static size_t py_bytes(uint32_t py_len)
{
	return (size_t)py_len * sizeof(struct py_frame_rec);
}

bool blockmemo__get(const struct blockmemo *m, const struct block_stack_key *k, uint64_t *stack_id)
{
	size_t pyb = py_bytes(k->py_len);

	if (!m->stack_id || m->site_id != k->site_id || m->py_gen != k->py_gen ||
	    m->flags != k->flags || m->py_len != k->py_len || m->kstack_len != k->kstack_len)
		return false;
	if ((pyb && memcmp(m->words, k->py, pyb)) ||
	    (k->kstack_len && memcmp(m->words + pyb, k->kst, k->kstack_len * 8ul)))
		return false;
	*stack_id = m->stack_id;
	return true;
}

int blockmemo__put(struct blockmemo *m, const struct block_stack_key *k, uint64_t stack_id)
{
	size_t pyb = py_bytes(k->py_len), need = pyb + k->kstack_len * 8ul;
	uint8_t *w;

	m->stack_id = 0;
	if (need > m->cap) {
		w = realloc(m->words, need);
		if (!w) {
			blockmemo__release(m);
			return -ENOMEM;
		}
		m->words = w;
		m->cap = need;
	}
	if (pyb)
		memcpy(m->words, k->py, pyb);
	if (k->kstack_len)
		memcpy(m->words + pyb, k->kst, k->kstack_len * 8ul);
	m->site_id = k->site_id;
	m->py_gen = k->py_gen;
	m->flags = k->flags;
	m->py_len = k->py_len;
	m->kstack_len = k->kstack_len;
	m->stack_id = stack_id;
	return 0;
}

void blockmemo__release(struct blockmemo *m)
{
	free(m->words);
	memset(m, 0, sizeof(*m));
}
