/* SPDX-License-Identifier: MIT */
/* btjob's internals, shared by btjob.c (collect, group, text, JSON) and btsnap.c (files). */
#ifndef PROBING_BTJOB_INT_H
#define PROBING_BTJOB_INT_H

#include "live/btjob.h"

struct strpool;
struct symbolizer;

/* What bt_job.priv holds. */
struct btjob_priv {
	struct strpool *strings; /* the strings of a job read from a snapshot */
	struct symbolizer *sym;	 /* the symbols of a collected job's native frames */
};

/* An empty job of @nprocs processes, or NULL (ENOMEM). */
struct bt_job *btjob__new(int nprocs);

/* Fill nhosts and each process's label (with its host when there are several). */
void btjob__label(struct bt_job *j);

/* "running", "sleeping", "disk wait", "stopped", "zombie", "idle", "dead", "unknown" for a
 * /proc state letter, and back ('?' for a name that is none of them). */
const char *btjob__state_name(char state);
char btjob__state_letter(const char *name);

/* "holds", "waits", "no", or NULL (not applicable). */
const char *btjob__gil_name(enum bt_gil g);

/* "ok", "gone", "error". */
const char *btjob__status_name(enum bt_status s);

#endif
