// SPDX-License-Identifier: MIT
/*
 * probing merge: the recordings of a job's nodes (one probing record per node) made into one,
 * keeping every process's host and rank; or their backtrace snapshots (report/merge.h,
 * docs/jobs.md).
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "base/cli.h"
#include "base/outfile.h"
#include "report/merge.h"
#include "watch/jobdiag.h"

enum { OPT_FORCE = 256 };

static void usage(FILE *f)
{
	fputs("Usage: probing merge FILE... -o OUT.db [--force]\n"
	      "\n"
	      "Merge recordings into one: typically the recordings of a distributed job, one\n"
	      "made on each node ('probing record --children -o node.db' under srun, ssh,\n"
	      "pdsh or kubectl exec). The merged recording reads as any other: flamegraph\n"
	      "(--rank N, --by rank, --diff-ranks A,B), export and query see every rank of\n"
	      "every node. Each process keeps its host (processes.host) and its pid on that\n"
	      "host (processes.host_pid); a pid that another node's process already has is\n"
	      "moved above any real pid (pid + k*4194304). docs/jobs.md has recipes for Slurm\n"
	      "and torchrun, docs/sql.md \"Merged recordings\" the details.\n"
	      "\n"
	      "Backtrace snapshots ('probing backtrace --children -o node.db' on each node)\n"
	      "merge the same way into one snapshot: 'probing backtrace -i OUT.db' groups the\n"
	      "threads of every node and names the odd rank out across all of them. Crash\n"
	      "files ('probing run --crash', 'inject --crash') are snapshots: those of a job's\n"
	      "ranks merge into one, with every crash and its local variables.\n"
	      "\n"
	      "Watch reports ('probing watch' on each node: DIR/stall-*.db, the same stall\n"
	      "seen from every node) merge into one report, and the job is diagnosed again\n"
	      "over every node's ranks: the culprit, its node and line, when each node alone\n"
	      "saw only its ranks waiting. The diagnosis is printed and kept in watch_stall\n"
	      "(each node's own in watch_node_stalls; watch_ranks.host says whose rank).\n"
	      "\n"
	      "Every input is checked before anything is written: all recordings, all\n"
	      "snapshots or all watch reports (no other file), of the same format (the same\n"
	      "version of probing), recordings sampled at the same frequency; no file or\n"
	      "process twice. A merged file can be merged again with more.\n"
	      "\n"
	      "Options:\n"
	      "  -o, --output OUT    the merged recording (required; written to OUT.partial,\n"
	      "                      renamed to OUT when complete)\n"
	      "      --force         replace OUT even if it is read-only\n"
	      "  -h, --help          this help\n"
	      "\n"
	      "Examples:\n"
	      "  probing merge node0.db node1.db -o job.db\n"
	      "  probing merge rec/*.db -o job.db && probing flamegraph -i job.db --rank 3 "
	      "-o rank3.svg\n"
	      "  probing query -i job.db 'SELECT host, rank, pid, host_pid FROM processes'\n"
	      "  probing merge bt-node0.db bt-node1.db -o bt.db && probing backtrace -i bt.db\n"
	      "  probing merge node0/stall-*.db node1/stall-*.db -o job-stall.db\n",
	      f);
}

static const struct option options[] = {
	{"output", required_argument, NULL, 'o'},
	{"force", no_argument, NULL, OPT_FORCE},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

int cmd_merge(int argc, char **argv)
{
	static const struct merge_hooks hooks = {.reports = jobdiag__merged};
	unsigned int out_flags = OUTFILE_FORCE_HINT;
	const char *output = NULL;
	int c;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, ":o:h", options, NULL)) != -1) {
		switch (c) {
		case 'o':
			output = optarg;
			break;
		case OPT_FORCE:
			out_flags |= OUTFILE_FORCE;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return cli_bad_option("merge", c, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error("merge",
				       "give the recordings or snapshots to merge: FILE...");
	if (!output)
		return cli_usage_error("merge", "say where to write: -o FILE");
	if (!strcmp(output, "-"))
		return cli_usage_error("merge", "a merged recording is a file: -o FILE, not -o -");
	return merge__recordings((const char *const *)argv + optind, argc - optind, output,
				 out_flags, &hooks)
		       ? EXIT_FAIL
		       : EXIT_OK;
}

COMMAND(merge, cmd_merge, "merge recordings (or backtraces) of several nodes into one", 25);
