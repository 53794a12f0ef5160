// SPDX-License-Identifier: MIT
/* probing watch: record a job continuously, and diagnose it the moment it stalls. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/log.h"
#include "base/util.h"
#include "bpf/sampler.h"
#include "watch/watch.h"

#define CMD "watch"

static const char usage_text[] =
	"Usage: probing watch [OPTIONS] -p PID[,PID...] [--children] -o DIR\n"
	"       probing watch [OPTIONS] -o DIR -- COMMAND [ARGS...]\n"
	"       probing watch --dump DIR\n"
	"\n"
	"Watch a job for as long as it runs (days), recording it continuously at a low rate and\n"
	"diagnosing it the moment it stalls, every rank, with no change to its code.\n"
	"\n"
	"Recording: on-CPU and off-CPU samples (where threads run and where they wait) and the\n"
	"collectives (gloo, NCCL) of the processes and of every descendant they start, now or\n"
	"later (an elastic restart of the workers), into DIR as segment files, one recording\n"
	"each (rec-TIME-N.db; the one being written is rec-TIME-N.db.partial, readable at any\n"
	"time). Old segments are removed as new ones come: those older than --keep, and the\n"
	"oldest while all take more than --max-size. Read them with 'probing flamegraph -i',\n"
	"'probing query -i', 'probing export -i' while the watch runs and after: -i DIR reads\n"
	"them all as one recording, --last 5m its last 5 minutes.\n"
	"\n"
	"Stalls: a stall is declared when a collective has been in flight on some rank for\n"
	"longer than the threshold, when no rank completed a collective for that long, or when\n"
	"a rank dies (a signal, or a non-zero exit status). The threshold is --stall, or five\n"
	"times the longest time between two completions of a rank seen lately, never under\n"
	"--stall-floor. A job with no collectives completed whose PyTorch hooks are in (probing\n"
	"inject --torch) is judged by its training steps instead, asked of each process's agent\n"
	"once a second (the threshold: five times the longest step lately).\n"
	"At each stall (once per stall), and when asked (--dump, or SIGUSR1 to the watch),\n"
	"the watch writes one report, DIR/stall-TIME-N.db: every rank's stacks\n"
	"(Python and native, each thread's state and wait, as 'backtrace -o' writes them), the\n"
	"last --window seconds of samples and collectives, and a diagnosis: the rank that is\n"
	"elsewhere and where (the culprit), the collective and seq the others wait in, a\n"
	"mismatch of collectives, a dead rank and its signal, a rank spinning or blocked. The\n"
	"diagnosis is printed on stdout too. 'probing backtrace -i', 'query -i' (tables\n"
	"watch_stall, watch_ranks), 'flamegraph -i' read a report. A job whose collectives\n"
	"complete again is noted as recovered (on stdout, and in the report).\n"
	"Needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE). Killed at any moment, the\n"
	"watch leaves the job untouched and what it kept readable.\n"
	"\n"
	"Options:\n"
	"  -p, --pid PID[,PID...]  processes to watch (e.g. torchrun's pid with --children)\n"
	"      --children          also their descendants, now and later\n"
	"  -o, --output DIR        directory for the segments and reports (created if needed;\n"
	"                          one watch per directory)\n"
	"  -F, --freq HZ           samples per second, 1-1000 (default 19: a prime, so that it\n"
	"                          does not beat with periodic work; about 1/5 of record's\n"
	"                          default cost, enough for a flame graph of every minute)\n"
	"      --keep DURATION     keep this much of the recording (default 30m; s, m, h, d)\n"
	"      --max-size SIZE     the segments take at most this much (default 1G; K, M, G)\n"
	"      --segment DURATION  a new segment this often (default 1m)\n"
	"      --stall SECONDS     the stall threshold (default: from the job's pace)\n"
	"      --stall-floor SECONDS  the least threshold from the job's pace (default 30)\n"
	"      --window DURATION   samples and collectives in a report: the last (default 5m)\n"
	"      --on-stall CMD      run CMD (with /bin/sh) at each stall, with "
	"PROBING_WATCH_REPORT\n"
	"                          (the report's path), PROBING_WATCH_REASON, _KIND, _DIAGNOSIS,\n"
	"                          _CULPRIT_PID and _CULPRIT_RANK in its environment\n"
	"      --on-stall-interval DURATION  at most once per (default 5m)\n"
	"      --no-native         reports' stacks without native frames (nothing is held)\n"
	"      --max-reports N     reports kept, the oldest removed (default 100)\n"
	"      --dump DIR          ask the watch writing into DIR for a report now; print its "
	"path\n"
	"  -v, --verbose           more diagnostics\n"
	"  -h, --help              this help\n"
	"\n"
	"Examples:\n"
	"  sudo probing watch -p $(pgrep -o -f bin/torchrun) --children -o /var/tmp/watch\n"
	"  sudo probing watch -o watch --on-stall 'notify-send \"$PROBING_WATCH_DIAGNOSIS\"' -- "
	"\\\n"
	"       torchrun --nproc_per_node 8 train.py\n"
	"  sudo probing watch --dump /var/tmp/watch\n"
	"  probing backtrace -i /var/tmp/watch/stall-20250101-031200-1.db\n"
	"  probing query -i /var/tmp/watch/stall-20250101-031200-1.db \"SELECT * FROM "
	"watch_ranks\"\n"
	"  probing flamegraph -i /var/tmp/watch/rec-20250101-030100-7.db -o last-minute.svg\n";

enum {
	OPT_CHILDREN = 256,
	OPT_KEEP,
	OPT_MAX_SIZE,
	OPT_SEGMENT,
	OPT_STALL,
	OPT_STALL_FLOOR,
	OPT_WINDOW,
	OPT_ON_STALL,
	OPT_ON_STALL_INTERVAL,
	OPT_NO_NATIVE,
	OPT_MAX_REPORTS,
	OPT_DUMP,
};

static const struct option long_opts[] = {
	{"pid", required_argument, NULL, 'p'},
	{"target", required_argument, NULL, 't'},
	{"children", no_argument, NULL, OPT_CHILDREN},
	{"output", required_argument, NULL, 'o'},
	{"freq", required_argument, NULL, 'F'},
	{"keep", required_argument, NULL, OPT_KEEP},
	{"max-size", required_argument, NULL, OPT_MAX_SIZE},
	{"segment", required_argument, NULL, OPT_SEGMENT},
	{"stall", required_argument, NULL, OPT_STALL},
	{"stall-floor", required_argument, NULL, OPT_STALL_FLOOR},
	{"window", required_argument, NULL, OPT_WINDOW},
	{"on-stall", required_argument, NULL, OPT_ON_STALL},
	{"on-stall-interval", required_argument, NULL, OPT_ON_STALL_INTERVAL},
	{"no-native", no_argument, NULL, OPT_NO_NATIVE},
	{"max-reports", required_argument, NULL, OPT_MAX_REPORTS},
	{"dump", required_argument, NULL, OPT_DUMP},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{},
};

/* "1G", "500M", "64K", "1048576" -> bytes, at least @lo. */
static int parse_bytes(const char *s, uint64_t lo, uint64_t *out)
{
	char buf[64];
	size_t n = strlen(s);
	double mult = 1, v;

	if (!n || n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, n + 1);
	switch (buf[n - 1]) {
	case 'k':
	case 'K':
		mult = 1024;
		break;
	case 'm':
	case 'M':
		mult = 1024 * 1024;
		break;
	case 'g':
	case 'G':
		mult = 1024.0 * 1024 * 1024;
		break;
	case 't':
	case 'T':
		mult = 1024.0 * 1024 * 1024 * 1024;
		break;
	}
	if (mult > 1)
		buf[n - 1] = '\0';
	if (parse_seconds(buf, 0, 1e18 / mult, &v))
		return -EINVAL;
	if (v * mult < lo)
		return -ERANGE;
	*out = (uint64_t)(v * mult);
	return 0;
}

int cmd_watch(int argc, char **argv)
{
	struct watch_opts o = {
		.freq = 19,
		.keep_s = 1800,
		.max_bytes = 1ULL << 30,
		.segment_s = 60,
		.window_s = 300,
		.stall_floor_s = 30,
		.on_stall_interval_s = 300,
		.native = true,
		.max_reports = 100,
		.argc = argc,
		.argv = argv,
	};
	const char *dump = NULL;
	pid_t *pids = NULL;
	int npids = 0, c, ret, err;
	long v;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, "+:p:t:o:F:vh", long_opts, NULL)) != -1) {
		switch (c) {
		case 'p':
		case 't':
			free(pids);
			pids = NULL;
			if (cli_parse_pids(optarg, &pids, &npids))
				return cli_usage_error(CMD, "'%s' is not a PID or a list of PIDs",
						       optarg);
			break;
		case OPT_CHILDREN:
			o.children = true;
			break;
		case 'o':
			o.dir = optarg;
			break;
		case 'F':
			if (parse_long(optarg, 1, 1000, &v))
				return cli_usage_error(CMD,
						       "frequency '%s' must be a whole number of "
						       "Hz from 1 to 1000",
						       optarg);
			o.freq = v;
			break;
		case OPT_KEEP:
			if (parse_duration(optarg, 10, 365 * 86400.0, &o.keep_s))
				return cli_usage_error(CMD,
						       "--keep '%s' must be a duration from 10s to "
						       "365d (e.g. 90s, 30m, 2h, 7d)",
						       optarg);
			break;
		case OPT_MAX_SIZE:
			if (parse_bytes(optarg, 1 << 20, &o.max_bytes))
				return cli_usage_error(CMD,
						       "--max-size '%s' must be a size of at least "
						       "1M (e.g. 500M, 2G)",
						       optarg);
			break;
		case OPT_SEGMENT:
			if (parse_duration(optarg, 1, 86400, &o.segment_s))
				return cli_usage_error(CMD,
						       "--segment '%s' must be a duration from 1s "
						       "to 1d",
						       optarg);
			break;
		case OPT_STALL:
			if (parse_duration(optarg, 1, 30 * 86400.0, &o.stall_s))
				return cli_usage_error(CMD,
						       "--stall '%s' must be a number of seconds, "
						       "at least 1",
						       optarg);
			break;
		case OPT_STALL_FLOOR:
			if (parse_duration(optarg, 1, 30 * 86400.0, &o.stall_floor_s))
				return cli_usage_error(CMD,
						       "--stall-floor '%s' must be a number of "
						       "seconds, at least 1",
						       optarg);
			break;
		case OPT_WINDOW:
			if (parse_duration(optarg, 1, 86400, &o.window_s))
				return cli_usage_error(CMD,
						       "--window '%s' must be a duration from 1s "
						       "to 1d",
						       optarg);
			break;
		case OPT_ON_STALL:
			o.on_stall = optarg;
			break;
		case OPT_ON_STALL_INTERVAL:
			if (parse_duration(optarg, 0, 30 * 86400.0, &o.on_stall_interval_s))
				return cli_usage_error(CMD,
						       "--on-stall-interval '%s' must be a "
						       "duration (e.g. 0, 10m)",
						       optarg);
			break;
		case OPT_NO_NATIVE:
			o.native = false;
			break;
		case OPT_MAX_REPORTS:
			if (parse_long(optarg, 1, 1000000, &v))
				return cli_usage_error(CMD, "--max-reports '%s' must be at least 1",
						       optarg);
			o.max_reports = v;
			break;
		case OPT_DUMP:
			dump = optarg;
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			fputs(usage_text, stdout);
			free(pids);
			return EXIT_OK;
		default:
			free(pids);
			return cli_bad_option(CMD, c, argv);
		}
	}
	if (dump) {
		free(pids);
		if (npids || o.dir || optind < argc)
			return cli_usage_error(CMD, "--dump DIR takes nothing else: it asks the "
						    "watch running in DIR for a report");
		return watch__dump(dump, 60);
	}
	err = cli_command_after_dashdash(CMD, argc, argv, &o.command);
	if (err) {
		free(pids);
		return err;
	}
	if (!npids && !o.command)
		return cli_usage_error(CMD, "say what to watch: -p PID, or -- COMMAND");
	if (npids && o.command) {
		free(pids);
		return cli_usage_error(CMD, "give either -p PID or a command after '--', not both");
	}
	if (!o.dir) {
		free(pids);
		return cli_usage_error(CMD, "say where to keep the recording and the reports: -o "
					    "DIR");
	}
	if (o.segment_s > o.keep_s)
		o.segment_s = o.keep_s;
	o.pids = pids;
	o.npids = npids;
	ret = watch__run(&o);
	free(pids);
	return ret;
}

COMMAND(watch, cmd_watch, "record a job continuously and diagnose it the moment it stalls", 15);
