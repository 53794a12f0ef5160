// SPDX-License-Identifier: MIT
/* probing record: sample processes into a recording file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <limits.h>
#include <sys/stat.h>

#include "pyoffsets/pyoffsets.h"
#include "base/cli.h"
#include "base/log.h"
#include "base/util.h"
#include "record/preflight.h"
#include "record/session.h"
#include "record/store.h"
#include "record/summary.h"

#define CMD "record"

static const char usage_text[] =
	"Usage: probing record [OPTIONS] -p PID[,PID...]\n"
	"       probing record [OPTIONS] -- COMMAND [ARGS...]\n"
	"\n"
	"Sample the native and Python stacks of every thread of running processes, or of a\n"
	"command it starts (not both), into a recording file (SQLite). Python frames "
	"(CPython\n" PY_VERSIONS
	") are merged with the native frames: C extensions and libraries appear under\n"
	"the Python function that called them. Recording ends after -d seconds, on Ctrl-C or\n"
	"SIGTERM, or when every target has exited; the data is saved in every case.\n"
	"Needs root (or the capabilities CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE).\n"
	"Sampling is on-CPU: a thread that sleeps or waits the whole time has no samples,\n"
	"unless --off-cpu (wall-clock time: where threads wait, and why).\n"
	"Pids are those of the PID namespace probing runs in (inside a container, the\n"
	"container's; on the host, the host's); docs/sql.md has the details.\n"
	"\n"
	"Options:\n"
	"  -p, --pid PID[,PID...]  processes to record (all their threads); kernel threads\n"
	"                          only with --kernel\n"
	"  -F, --freq HZ           samples per second per CPU, 1-10000 "
	"(default " PROBING_DEFAULT_HZ_STR ")\n"
	"  -d, --duration SECONDS  stop after this long (default: until Ctrl-C or exit)\n"
	"  -o, --output FILE       recording to write (default probing.db). While recording, the\n"
	"                          data is in FILE.partial, readable at any time; it becomes\n"
	"                          FILE when recording ends (a killed recorder leaves it as\n"
	"                          FILE.partial). An existing FILE is replaced then, keeping its\n"
	"                          permissions; a symbolic link is followed; anything but a\n"
	"                          regular file is refused.\n"
	"                          A FILE ending in .svg (flame graph), .folded (folded\n"
	"                          stacks), .pb.gz (pprof) or .json (speedscope) gets that\n"
	"                          format, as py-spy's -o does: the recording is kept beside\n"
	"                          it (x.svg: x.db, which must not exist yet) and FILE is\n"
	"                          drawn from it when recording ends ('probing flamegraph' or\n"
	"                          'probing export' with -i x.db draw it again)\n"
	"      --force             replace FILE even if it is read-only\n"
	"      --stack-size SIZE   most bytes of user stack copied per sample, 8K-64K (default\n"
	"                          64K); a sample copies only the part of its thread's stack in\n"
	"                          use, so this bounds what deep stacks cost (Python 3.8-3.10\n"
	"                          use about 0.5K per Python call); deeper stacks are kept but\n"
	"                          marked as not unwound to their outermost frame\n"
	"      --kernel            also record kernel stacks\n"
	"      --no-python         do not read Python stacks (native frames only)\n"
	"      --py-depth N        Python frames read per sample, 1-1024 "
	"(default " RECORDER_PY_DEPTH_STR "); deeper\n"
	"                          stacks keep their innermost N frames and are marked truncated\n"
	"      --no-native         do not unwind native stacks (keep only the function that was\n"
	"                          running)\n"
	"      --children          also record the targets' descendants: those running now and\n"
	"                          those started while recording (e.g. every rank of a job:\n"
	"                          -p <torchrun, srun or mpirun pid> --children). Each process's\n"
	"                          place in its job (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK,\n"
	"                          PMI_RANK...) goes into the table processes; the summary\n"
	"                          lists the ranks\n"
	"      --off-cpu           wall-clock time (py-spy's --idle): also record where\n"
	"                          threads wait while off their CPU, and why: states sleep,\n"
	"                          lock (mutexes, conditions, Event.wait), io, gil (waiting\n"
	"                          for Python's GIL), runnable\n"
	"                          (waiting for a CPU), other. Threads off their CPU are\n"
	"                          observed once per sampling period, as on-CPU time is\n"
	"                          sampled: a wait shorter than a period is seen in proportion\n"
	"                          to its length, nothing runs at context switches. Each stack\n"
	"                          then has its time (samples.ns) and state; flame graphs and\n"
	"                          exports show wall-clock time (docs/sql.md, \"Off-CPU time\")\n"
	"      --no-comm           do not record collective communication calls. By default\n"
	"                          the collectives of PyTorch's gloo process groups (libtorch)\n"
	"                          and NCCL's API (libnccl) are recorded with uprobes in the\n"
	"                          targets that load those libraries, now or later: the table\n"
	"                          collectives (docs/sql.md) and the stragglers in the summary\n"
	"  -v, --verbose           more diagnostics (repeat for more)\n"
	"  -h, --help              this help\n"
	"\n"
	"Examples:\n"
	"  sudo probing record -p 1234 -F 999 -d 10 -o app.db\n"
	"  sudo probing record -o app.db -- ./myprog --input data.bin\n"
	"  sudo probing record --children -p 4321 -d 30 -o job.db    # 4321: torchrun\n"
	"  sudo probing record --off-cpu -p 1234 -d 5 -o hang.db    # where a hung job waits\n"
	"  sudo probing record -p 1234 -d 10 -o prof.svg   # a flame graph; prof.db kept beside\n"
	"  probing flamegraph -i app.db -o app.svg\n";

enum {
	OPT_STACK_SIZE = 256,
	OPT_KERNEL,
	OPT_NO_NATIVE,
	OPT_NO_PYTHON,
	OPT_CHILDREN,
	OPT_PY_DEPTH,
	OPT_FORCE,
	OPT_OFF_CPU,
	OPT_NO_COMM,
};

static const struct option long_opts[] = {
	{"pid", required_argument, NULL, 'p'},
	{"freq", required_argument, NULL, 'F'},
	{"duration", required_argument, NULL, 'd'},
	{"output", required_argument, NULL, 'o'},
	{"stack-size", required_argument, NULL, OPT_STACK_SIZE},
	{"kernel", no_argument, NULL, OPT_KERNEL},
	{"no-native", no_argument, NULL, OPT_NO_NATIVE},
	{"no-python", no_argument, NULL, OPT_NO_PYTHON},
	{"py-depth", required_argument, NULL, OPT_PY_DEPTH},
	{"children", no_argument, NULL, OPT_CHILDREN},
	{"no-comm", no_argument, NULL, OPT_NO_COMM},
	{"force", no_argument, NULL, OPT_FORCE},
	{"off-cpu", no_argument, NULL, OPT_OFF_CPU},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{"target", required_argument, NULL, 't'},
	{},
};

/* "16K", "16k", "16384" -> bytes. */
static int parse_size(const char *s, long *out)
{
	char buf[64];
	size_t n = strlen(s);
	long mult = 1;

	if (!n || n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, n + 1);
	if (buf[n - 1] == 'k' || buf[n - 1] == 'K') {
		mult = 1024;
		buf[n - 1] = '\0';
	}
	if (parse_long(buf, 0, 1 << 30, out))
		return -EINVAL;
	*out *= mult;
	return 0;
}

/*
 * py-spy's habit, "record -o x.svg": an output named for another format than a recording gets
 * that format, made by another command from the recording kept beside it (x.db).
 */
struct derived_output {
	const char *ext;  /* how the output's name ends */
	const char *what; /* what it holds, for messages: "a flame graph" */
	const char *cmd;  /* the command that makes it from a recording: flamegraph, export */
	const char *opt;  /* and its options: "--folded"; "--format" */
	const char *val;  /* "pprof" (NULL: @opt has no value) */
};

static const struct derived_output derived_outputs[] = {
	{".svg", "a flame graph", "flamegraph", NULL, NULL},
	{".folded", "folded stacks", "flamegraph", "--folded", NULL},
	{".pb.gz", "a pprof profile", "export", "--format", "pprof"},
	{".json", "a speedscope profile", "export", "--format", "speedscope"},
	{},
};

/* The derived format @output is named for, or NULL (a recording). */
static const struct derived_output *derived_output_of(const char *output)
{
	const struct derived_output *d;
	size_t n = strlen(output), e;

	for (d = derived_outputs; d->ext; d++) {
		e = strlen(d->ext);
		if (n > e && !strcasecmp(output + n - e, d->ext) && output[n - e - 1] != '/')
			return d;
	}
	return NULL;
}

/*
 * The command that makes @output (format @d) from the recording @rec, in @argv (room for 8)
 * and as one line of shell in @line. Return its argc.
 */
static int derived_command(const struct derived_output *d, const char *rec, const char *output,
			   bool force, char **argv, char *line, size_t size)
{
	int n = 0, i;
	size_t len;

	argv[n++] = (char *)d->cmd;
	argv[n++] = "-i";
	argv[n++] = (char *)rec;
	if (d->opt)
		argv[n++] = (char *)d->opt;
	if (d->val)
		argv[n++] = (char *)d->val;
	argv[n++] = "-o";
	argv[n++] = (char *)output;
	if (force)
		argv[n++] = "--force";
	argv[n] = NULL;
	len = snprintf(line, size, "probing");
	for (i = 0; i < n && len < size; i++)
		len += snprintf(line + len, size - len,
				strpbrk(argv[i], " \t'\"$\\") ? " '%s'" : " %s", argv[i]);
	return n;
}

/*
 * For "-o x.svg" (@d): the recording's name beside it, x.db, malloc'd in *@rec. Refuse (and
 * say what to run instead) when x.db exists: it is not ours to replace. Return 0 or an exit
 * status.
 */
static int derived_recording(const struct derived_output *d, const char *output, char **rec)
{
	size_t stem = strlen(output) - strlen(d->ext);
	char line[PATH_MAX * 2 + 64], *argv[9];
	struct stat st;

	if (asprintf(rec, "%.*s.db", (int)stem, output) < 0) {
		*rec = NULL;
		pr_warn("out of memory");
		return EXIT_FAIL;
	}
	if (lstat(*rec, &st))
		return 0;
	derived_command(d, "NEW.db", output, false, argv, line, sizeof(line));
	log_cmd("record",
		"-o %s makes %s from a recording kept beside it, %s, which exists already and is "
		"not replaced: record into a new file and draw it from there: 'probing record ... "
		"-o NEW.db' then '%s'",
		output, d->what, *rec, line);
	free(*rec);
	*rec = NULL;
	return EXIT_USAGE;
}

/* Make @output (format @d) from the recording @rec just written. Return an exit status. */
static int derive_output(const struct derived_output *d, const char *rec, const char *output,
			 bool force)
{
	char line[PATH_MAX * 2 + 64], *argv[9];
	int argc, ret;

	argc = derived_command(d, rec, output, force, argv, line, sizeof(line));
	ret = cli_run_command(argc, argv);
	if (ret == EXIT_OK)
		pr_warn("wrote %s (%s); the recording is kept in %s ('%s' makes it again, 'probing "
			"serve -i %s' shows it in a browser)",
			output, d->what, rec, line, rec);
	else
		pr_warn("the recording is in %s; make %s from it with '%s'", rec, d->what, line);
	return ret;
}

int cmd_record(int argc, char **argv)
{
	struct session_opts o = {
		.sampling = {.freq = PROBING_DEFAULT_HZ,
			     .stack_size = SAMPLER_MAX_STACK,
			     .python = true},
		.recorder = {.native = true, .py_depth = RECORDER_PY_DEPTH},
		.output = "probing.db",
		.comm = true,
		.argc = argc,
		.argv = argv,
	};
	const struct derived_output *derived = NULL;
	const char *derived_out = NULL;
	char *derived_rec = NULL;
	struct session *s = NULL;
	struct record_totals t;
	pid_t *pids = NULL;
	int npids = 0, c, i, err, ret = EXIT_FAIL;
	long v;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, "+:p:F:d:o:t:vh", long_opts, NULL)) != -1) {
		switch (c) {
		case 'p':
		case 't':
			free(pids);
			pids = NULL;
			if (cli_parse_pids(optarg, &pids, &npids))
				return cli_usage_error(CMD, "'%s' is not a PID or a list of PIDs",
						       optarg);
			break;
		case 'F':
			if (parse_long(optarg, 1, SAMPLER_MAX_FREQ, &v))
				return cli_usage_error(
					CMD,
					"frequency '%s' must be a whole number of Hz from 1 to %d",
					optarg, SAMPLER_MAX_FREQ);
			o.sampling.freq = v;
			break;
		case 'd':
			if (parse_seconds(optarg, 0.001, 1e7, &o.duration))
				return cli_usage_error(CMD,
						       "duration '%s' must be a positive number "
						       "of seconds",
						       optarg);
			break;
		case 'o':
			o.output = optarg;
			break;
		case OPT_STACK_SIZE:
			if (parse_size(optarg, &v) || v < 8192 || v > SAMPLER_MAX_STACK)
				return cli_usage_error(
					CMD, "stack size '%s' must be from 8K to 64K", optarg);
			o.sampling.stack_size = v;
			break;
		case OPT_KERNEL:
			o.sampling.kernel = true;
			break;
		case OPT_NO_NATIVE:
			o.recorder.native = false;
			break;
		case OPT_NO_PYTHON:
			o.sampling.python = false;
			break;
		case OPT_PY_DEPTH:
			if (parse_long(optarg, 1, SAMPLER_MAX_PYDEPTH, &v))
				return cli_usage_error(CMD,
						       "Python depth '%s' must be from 1 to %d",
						       optarg, SAMPLER_MAX_PYDEPTH);
			o.recorder.py_depth = v;
			break;
		case OPT_CHILDREN:
			o.sampling.children = true;
			break;
		case OPT_NO_COMM:
			o.comm = false;
			break;
		case OPT_FORCE:
			o.store_flags |= STORE_FORCE;
			break;
		case OPT_OFF_CPU:
			o.sampling.off_cpu = true;
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return EXIT_OK;
		default:
			return cli_bad_option(CMD, c, argv);
		}
	}
	err = cli_command_after_dashdash(CMD, argc, argv, &o.command);
	if (err) {
		free(pids);
		return err;
	}
	if (!npids && !o.command)
		return cli_usage_error(CMD, "say what to record: -p PID, or -- COMMAND");
	if (npids && o.command) {
		free(pids);
		return cli_usage_error(CMD,
				       "give either -p PID or a command after '--', not both (to "
				       "record a process for a fixed time, use -p PID -d SECONDS)");
	}
	if (!o.recorder.native)
		o.sampling.stack_size = 0;
	derived = derived_output_of(o.output);
	if (derived) {
		ret = derived_recording(derived, o.output, &derived_rec);
		if (ret != EXIT_OK) {
			free(pids);
			return ret;
		}
		ret = EXIT_FAIL;
		pr_warn("recording into %s; %s (%s) is made from it at the end", derived_rec,
			o.output, derived->what);
		derived_out = o.output;
		o.output = derived_rec;
	}
	o.pids = pids;
	o.npids = npids;

	for (i = 0; i < npids; i++)
		if (preflight_target(pids[i], o.sampling.kernel))
			goto cleanup;
	if (preflight_privileges() || preflight_pidns(&o.sampling.pidns_inum))
		goto cleanup;
	/* What off-CPU stacks keep without them. */
	if (o.sampling.off_cpu && !o.sampling.python)
		log_cmd("record", "--off-cpu with --no-python: stacks have native frames only, and "
				  "waits for the Python GIL count as 'lock' (telling them apart "
				  "needs the interpreter, which --no-python leaves unread)");
	if (o.sampling.off_cpu && !o.recorder.native)
		log_cmd("record", "--off-cpu with --no-native: stacks keep the Python frames and "
				  "the function each thread runs or waits in");

	if (session__open(&o, &s))
		goto cleanup;
	/* A recording stopped by an error keeps what it has (said on stderr), and exits 1. */
	err = session__run(s);
	session__finish(s, &t);
	ret = summary__print(&t, &o);
	if ((session__close(s) || err) && ret == EXIT_OK)
		ret = EXIT_FAIL; /* the reason and where the data is were printed */
	if (derived && ret == EXIT_OK)
		ret = derive_output(derived, derived_rec, derived_out, o.store_flags & STORE_FORCE);
cleanup:
	free(derived_rec);
	free(pids);
	return ret;
}

COMMAND(record, cmd_record, "sample native and Python stacks of processes into a recording", 10);
