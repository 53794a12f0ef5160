/* SPDX-License-Identifier: MIT */
/* strpool: interned strings that live as long as the pool (for names borrowed by frames). */
#ifndef PROBING_STRPOOL_H
#define PROBING_STRPOOL_H

struct strpool;

struct strpool *strpool__new(void);
/* Free the pool and every string it handed out. NULL is a no-op. */
void strpool__free(struct strpool *sp);
/* The pool's copy of @s (same pointer for equal strings); NULL for NULL or on ENOMEM. */
const char *strpool__intern(struct strpool *sp, const char *s);

#endif
