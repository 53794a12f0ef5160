/* SPDX-License-Identifier: MIT */
/*
 * jobdiag: the diagnosis of a whole job from its nodes' watch reports, once 'probing merge'
 * has put them in one file (report/merge.h: watch_ranks and watch_node_stalls with each
 * row's host). Each node's watch sees its own ranks only: a node whose ranks all wait says
 * "all-waiting", the node of a rank that stopped elsewhere may say "no-progress"; with every
 * node's ranks together, diagnose() names the culprit, its node and line.
 */
#ifndef PROBING_JOBDIAG_H
#define PROBING_JOBDIAG_H

#include <sqlite3.h>

/*
 * Read the ranks of the merged report open on @db (main.watch_ranks, main.watch_node_stalls,
 * main.processes), diagnose them as one job, write the job's row into main.watch_stall
 * (time: the latest node's stall; host: the culprit's node) and print the diagnosis on
 * stdout. @arg is unused (merge_hooks). Return 0, or -errno with the reason printed.
 */
int jobdiag__merged(sqlite3 *db, void *arg);

#endif
