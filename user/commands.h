/* SPDX-License-Identifier: MIT */
/* Entry points of the sub-commands (user/cmd_*.c); each returns the process exit status. */
#ifndef PROBING_COMMANDS_H
#define PROBING_COMMANDS_H

int cmd_record(int argc, char **argv);
int cmd_flamegraph(int argc, char **argv);
int cmd_query(int argc, char **argv);

#endif
