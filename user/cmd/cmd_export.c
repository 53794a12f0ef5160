// SPDX-License-Identifier: MIT
/*
 * probing export: a recording in the interchange formats other profiling tools read; and the
 * PyTorch hooks' per-module timeline (python.torch_trace, live or saved) as Chrome trace JSON.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/cli.h"
#include "report/flamegraph.h"
#include "live/live.h"
#include "live/livedb.h"
#include "base/log.h"
#include "base/outfile.h"
#include "report/pprof.h"
#include "report/profile.h"
#include "report/recording.h"
#include "report/speedscope.h"
#include "report/torchtrace.h"
#include "base/util.h"

#define DEFAULT_HZ 99 /* probing record's default -F */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing export [-i FILE] --format pprof|folded|speedscope -o OUT\n"
		"                      [--pid N] [--tid N] [--force]\n"
		"       probing export (-p PID | -i FILE) --format chrome -o OUT [--force]\n"
		"\n"
		"Write a recording in a format other tools read:\n"
		"  pprof       gzipped profile.proto, for 'go tool pprof', Pyroscope, Parca: "
		"sample\n"
		"              types samples/count and cpu/nanoseconds, functions, locations with\n"
		"              lines, labels pid, tid and thread\n"
		"  folded      folded stacks, \"root;...;leaf COUNT\" (flamegraph.pl, inferno); "
		"the\n"
		"              same as 'probing flamegraph --folded'\n"
		"  speedscope  speedscope's JSON (https://www.speedscope.app): one profile per\n"
		"              thread, samples in time order (one-second resolution)\n"
		"  chrome      the PyTorch hooks' per-module timeline (python.torch_trace, see\n"
		"              'probing inject --torch') as Chrome trace JSON for Perfetto\n"
		"              (https://ui.perfetto.dev) or chrome://tracing: one complete event\n"
		"              per module call and optimizer step, nested by time on a track per\n"
		"              process and thread, and a track of the steps. From a live process\n"
		"              (-p PID) or from a file saved with 'probing query -p PID --save'\n"
		"\n"
		"Options:\n"
		"  -i, --input FILE      the recording to read (default: probing.db)\n"
		"  -p PID                (chrome) read python.torch_trace of a live process "
		"(--pid\n"
		"                        is the sample filter below)\n"
		"  -t, --target T        the same for a PID, or HOST:PORT of an agent serving TCP\n"
		"  -f, --format FORMAT   pprof, folded, speedscope or chrome\n"
		"  -o, --output FILE     where to write; '-' = stdout. An existing file is\n"
		"                        replaced only once the new one is complete, keeping its\n"
		"                        permissions; a symbolic link is followed; devices and\n"
		"                        FIFOs are written in place, directories refused\n"
		"      --force           replace FILE even if it is read-only\n"
		"      --pid N           only the samples of process N\n"
		"      --tid N           only the samples of thread N\n"
		"  -h, --help            show this help\n"
		"\n"
		"Examples:\n"
		"  probing export -i app.db --format pprof -o app.pb.gz && go tool pprof -top "
		"app.pb.gz\n"
		"  probing export -i app.db --format speedscope -o app.speedscope.json\n"
		"  probing export -i app.db --format folded -o - | flamegraph.pl > app.svg\n"
		"  probing export -p 1234 --format chrome -o steps.json   # then open it in "
		"Perfetto\n");
}

enum format {
	FMT_NONE,
	FMT_PPROF,
	FMT_FOLDED,
	FMT_SPEEDSCOPE,
	FMT_CHROME,
};

enum {
	OPT_PID = 256,
	OPT_TID,
	OPT_FORCE,
};

static const struct option options[] = {
	{"input", required_argument, NULL, 'i'},
	{"target", required_argument, NULL, 't'},
	{"format", required_argument, NULL, 'f'},
	{"output", required_argument, NULL, 'o'},
	{"pid", required_argument, NULL, OPT_PID},
	{"tid", required_argument, NULL, OPT_TID},
	{"force", no_argument, NULL, OPT_FORCE},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static int write_pprof(const struct profile *p, const char *input, FILE *f)
{
	struct strbuf pb = {0};
	double hz = p->frequency;
	int err;

	if (hz <= 0) {
		pr_warn("%s does not say its sampling frequency; computing CPU time at %d Hz",
			input, DEFAULT_HZ);
		hz = DEFAULT_HZ;
	}
	err = pprof__encode(p, hz, &pb);
	if (!err)
		err = pprof__gzip(f, pb.buf, pb.len);
	sb_free(&pb);
	return err;
}

static int write_folded(const struct profile *p, FILE *f)
{
	struct strbuf text = {0};
	struct fg *g = fg__new();
	int err = g ? 0 : -ENOMEM;

	if (!err)
		err = fg__add_profile(g, p);
	if (!err)
		err = fg__folded(g, &text);
	if (!err && text.len && fwrite(text.buf, 1, text.len, f) != text.len)
		err = -EIO;
	sb_free(&text);
	fg__free(g);
	return err;
}

/*
 * --format chrome: python.torch_trace of a live target (@pid_arg/@t_arg) or the torch_trace
 * table of the recording @input, to @output. Return an exit status.
 */
static int export_chrome(const char *input, const char *pid_arg, const char *t_arg,
			 const char *output, unsigned int out_flags)
{
	struct live_target t = {0};
	struct outfile *of = NULL;
	const char *table = "python.torch_trace";
	sqlite3 *db = NULL;
	long long n = 0;
	int rc, err, ret = EXIT_FAIL;
	char desc[128];

	if (pid_arg || t_arg) {
		rc = live__target("export", pid_arg, t_arg, &t);
		if (rc)
			return rc;
	}
	/* The output first: a file that may not be written is refused before any work. */
	if (outfile__open(output, out_flags, &of))
		return EXIT_FAIL;
	if (pid_arg || t_arg) {
		if (livedb__open_target(&t, LIVE_GIL_TIMEOUT_MS, &db))
			goto cleanup;
		live__describe(&t, desc, sizeof(desc));
	} else {
		if (recording__open(input, &db))
			goto cleanup;
		table = "torch_trace";
		snprintf(desc, sizeof(desc), "%s", input);
		if (sqlite3_table_column_metadata(db, "main", "torch_trace", NULL, NULL, NULL, NULL,
						  NULL, NULL) != SQLITE_OK) {
			pr_warn("%s has no PyTorch trace (table torch_trace): save one from a live "
				"process with 'probing query -p PID --save %s'",
				input, input);
			goto cleanup;
		}
	}
	err = torchtrace__chrome(db, table, outfile__fp(of), &n);
	if (err) {
		if (err == -ENOENT)
			pr_warn("no rows in %s of %s: install the hooks with 'probing inject -p "
				"PID "
				"--torch' and let a few training steps run",
				table, desc);
		else if (err != -EINVAL)
			pr_warn("cannot write %s: %s", output,
				err == -ENOMEM ? "out of memory" : strerror(errno ? errno : EIO));
		else if (pid_arg || t_arg)
			pr_warn("(are the PyTorch hooks installed? 'probing inject -p PID "
				"--torch')");
		goto cleanup;
	}
	err = outfile__commit(of);
	of = NULL;
	if (err)
		goto cleanup;
	pr_info("%lld events from %s written to %s", n, desc, output);
	ret = EXIT_OK;
cleanup:
	outfile__abort(of);
	if (pid_arg || t_arg)
		sqlite3_close(db);
	else
		recording__close(db);
	return ret;
}

int cmd_export(int argc, char **argv)
{
	const char *input = "probing.db", *output = NULL, *pid_arg = NULL, *t_arg = NULL;
	bool input_given = false;
	struct profile_filter flt = {0};
	enum format fmt = FMT_NONE;
	unsigned int out_flags = OUTFILE_FORCE_HINT;
	struct outfile *of = NULL;
	struct profile *prof = NULL;
	sqlite3 *db = NULL;
	int c, err, ret = EXIT_FAIL;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, ":i:f:o:p:t:h", options, NULL)) != -1) {
		switch (c) {
		case 'i':
			input = optarg;
			input_given = true;
			break;
		case 'p':
			pid_arg = optarg;
			break;
		case 't':
			t_arg = optarg;
			break;
		case 'o':
			output = optarg;
			break;
		case 'f':
			if (!strcmp(optarg, "pprof"))
				fmt = FMT_PPROF;
			else if (!strcmp(optarg, "folded"))
				fmt = FMT_FOLDED;
			else if (!strcmp(optarg, "speedscope"))
				fmt = FMT_SPEEDSCOPE;
			else if (!strcmp(optarg, "chrome"))
				fmt = FMT_CHROME;
			else
				return cli_usage_error("export",
						       "unknown --format '%s': use pprof, folded, "
						       "speedscope or chrome",
						       optarg);
			break;
		case OPT_PID:
			if (cli_parse_id("export", "--pid", optarg, &flt.pid))
				return EXIT_USAGE;
			break;
		case OPT_TID:
			if (cli_parse_id("export", "--tid", optarg, &flt.tid))
				return EXIT_USAGE;
			break;
		case OPT_FORCE:
			out_flags |= OUTFILE_FORCE;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return cli_bad_option("export", c, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("export", "unexpected argument '%s'", argv[optind]);
	if (fmt == FMT_NONE)
		return cli_usage_error("export", "say which format: --format pprof, folded, "
						 "speedscope or chrome");
	if (!output)
		return cli_usage_error("export", "say where to write: -o FILE ('-o -' for stdout)");
	if ((pid_arg || t_arg) && fmt != FMT_CHROME)
		return cli_usage_error("export",
				       "-p/-t read a live process: only --format chrome "
				       "(its PyTorch timeline) comes from there; the others "
				       "need a recording (-i FILE)");
	if ((pid_arg || t_arg) && input_given)
		return cli_usage_error("export", "give either -i FILE or -p PID, not both");
	if (fmt == FMT_CHROME && (flt.pid || flt.tid))
		return cli_usage_error("export", "--pid/--tid filter samples: filter the timeline "
						 "with SQL (query --save) instead");
	if (fmt == FMT_CHROME)
		return export_chrome(input, pid_arg, t_arg, output, out_flags);
	if (fmt == FMT_PPROF && !strcmp(output, "-") && stdout_is_tty())
		return cli_usage_error("export", "pprof is binary: write it to a file (-o FILE), "
						 "or redirect stdout");

	/* The output first: a file that may not be written is refused before any work. */
	if (outfile__open(output, out_flags, &of))
		goto cleanup;
	if (recording__open(input, &db))
		goto cleanup;
	if (fmt == FMT_SPEEDSCOPE)
		flt.flags |= PROFILE_BY_TIME;
	err = profile__load(db, &flt, &prof);
	if (err) {
		if (err == -ENOMEM)
			pr_warn("out of memory reading %s", input);
		goto cleanup;
	}
	if (!prof->total) {
		profile__explain_empty(db, input, &flt);
		goto cleanup;
	}
	switch (fmt) {
	case FMT_PPROF:
		err = write_pprof(prof, input, outfile__fp(of));
		break;
	case FMT_FOLDED:
		err = write_folded(prof, outfile__fp(of));
		break;
	default:
		err = speedscope__write(prof, input, outfile__fp(of));
		break;
	}
	if (err) {
		pr_warn("cannot write %s: %s", output,
			err == -ENOMEM ? "out of memory" : strerror(errno ? errno : EIO));
		goto cleanup;
	}
	err = outfile__commit(of);
	of = NULL;
	if (err)
		goto cleanup;
	ret = EXIT_OK;
cleanup:
	outfile__abort(of);
	profile__free(prof);
	recording__close(db);
	return ret;
}

COMMAND(export, cmd_export, "write a recording as pprof, folded stacks or speedscope JSON", 40);
