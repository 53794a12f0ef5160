// SPDX-License-Identifier: MIT
/* The declared live tables (livetables.h), from the build's live_tables.h. */
#include <string.h>

#include "base/util.h"
#include "live/livetables.h"

#include "live_tables.h" /* generated: live_tables_declared[] */

const struct live_table *live_tables(size_t *n)
{
	*n = ARRAY_SIZE(live_tables_declared);
	return live_tables_declared;
}

const struct live_table *live_table__find(const char *schema, const char *name)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(live_tables_declared); i++)
		if (!strcmp(live_tables_declared[i].schema, schema) &&
		    !strcmp(live_tables_declared[i].name, name))
			return &live_tables_declared[i];
	return NULL;
}
