/* SPDX-License-Identifier: MIT */
/*
 * summary: what a finished recording tells its user on stderr — what was recorded and lost,
 * what probing itself cost (with -v), and why a recording without samples has none.
 */
#ifndef PROBING_SUMMARY_H
#define PROBING_SUMMARY_H

#include "record/session.h"

/*
 * Say what the recording @t of @o (its frequency, its file) holds. Return EXIT_FAIL (base/cli.h)
 * when the targets ran but were not sampled (a fault of probing), else EXIT_OK: an empty
 * recording of idle or short-lived processes is a true result, and says why it is empty.
 */
int summary__print(const struct record_totals *t, const struct session_opts *o);

#endif
