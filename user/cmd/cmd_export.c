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
#include "live/jobsql.h"
#include "live/live.h"
#include "live/livedb.h"
#include "live/livejob.h"
#include "base/log.h"
#include "base/outfile.h"
#include "report/export.h"
#include "report/profile.h"
#include "report/recording.h"
#include "report/recwindow.h"
#include "base/util.h"

/* Kinds of formats: of the samples of a recording, of the PyTorch timeline. */
#define OF_SAMPLES 1u
#define OF_TRACE   2u

static unsigned int format_kind(const struct export_format *x)
{
	return x->write_trace ? OF_TRACE : OF_SAMPLES;
}

/* The names of the formats of the kinds @which, joined by @sep, the last two by @last, in
 * @buf. Return @buf. */
static const char *format_names(unsigned int which, const char *sep, const char *last, char *buf,
				size_t size)
{
	const struct export_format *x;
	size_t n = 0, len = 0, i = 0;
	const char *before;

	for (x = export_formats; x->name; x++)
		n += !!(which & format_kind(x));
	buf[0] = '\0';
	for (x = export_formats; x->name && len < size; x++) {
		if (!(which & format_kind(x)))
			continue;
		before = sep;
		if (i == 0)
			before = "";
		else if (i + 1 == n)
			before = last;
		len += snprintf(buf + len, size - len, "%s%s", before, x->name);
		i++;
	}
	return buf;
}

static void usage(FILE *f)
{
	const struct export_format *x;
	const char *p, *nl;
	char samples[256], trace[256], all[256];

	fprintf(f,
		"Usage: probing export [-i FILE|DIR] --format %s -o OUT\n"
		"                      [--pid N] [--tid N] [--last DURATION] [--force]\n"
		"       probing export (-p PID[,PID...] [--children] | -i FILE) --format %s -o "
		"OUT\n"
		"                      [--force]\n"
		"\n"
		"Write a recording in a format other tools read:\n",
		format_names(OF_SAMPLES, "|", "|", samples, sizeof(samples)),
		format_names(OF_TRACE, "|", "|", trace, sizeof(trace)));
	/* Each format's help, its lines after its name. */
	for (x = export_formats; x->name; x++) {
		for (p = x->help; *p; p = nl + 1) {
			nl = strchrnul(p, '\n');
			fprintf(f, "  %-10s  %.*s\n", p == x->help ? x->name : "", (int)(nl - p),
				p);
			if (!*nl)
				break;
		}
	}
	fprintf(f,
		"\n"
		"Options:\n"
		"  -i, --input FILE      the recording to read (default: probing.db), or the\n"
		"                        directory of a 'probing watch -o DIR': what it keeps\n"
		"  -p PID                (%s) read python.torch_trace of a live process (--pid\n"
		"                        is the sample filter below)\n"
		"  -t, --target T        the same for a PID, or HOST:PORT of an agent serving TCP\n"
		"      --children        with -p: every rank of a job (each PID and all its\n"
		"                        descendants now) in one timeline, a process per rank;\n"
		"                        ranks without the hooks are reported and left out\n"
		"  -f, --format FORMAT   %s\n"
		"  -o, --output FILE     where to write; '-' = stdout. An existing file is\n"
		"                        replaced only once the new one is complete, keeping its\n"
		"                        permissions; a symbolic link is followed; devices and\n"
		"                        FIFOs are written in place, directories refused\n"
		"      --force           replace FILE even if it is read-only\n"
		"      --pid N           only the samples of process N in the recording (not\n"
		"                        -p, which reads a live process)\n"
		"      --tid N           only the samples of thread N in the recording\n"
		"      --last DURATION   only the last DURATION of the recording (90s, 5m, 2h),\n"
		"                        back from its latest second sampled\n"
		"  -h, --help            show this help\n"
		"\n"
		"Examples:\n"
		"  probing export -i app.db --format pprof -o app.pb.gz && go tool pprof -top "
		"app.pb.gz\n"
		"  probing export -i app.db --format speedscope -o app.speedscope.json\n"
		"  probing export -i /var/tmp/watch --last 5m --format pprof -o last5m.pb.gz\n"
		"  probing export -i app.db --format folded -o - | flamegraph.pl > app.svg\n"
		"  probing export -p 1234 --format chrome -o steps.json   # then open it in "
		"Perfetto\n"
		"  probing export -p $(pgrep -f torchrun) --children --format chrome -o job.json\n",
		format_names(OF_TRACE, "/", "/", trace, sizeof(trace)),
		format_names(OF_SAMPLES | OF_TRACE, ", ", " or ", all, sizeof(all)));
}

enum {
	OPT_PID = 256,
	OPT_TID,
	OPT_FORCE,
	OPT_CHILDREN,
	OPT_LAST,
};

static const struct option options[] = {
	{"input", required_argument, NULL, 'i'},
	{"target", required_argument, NULL, 't'},
	{"format", required_argument, NULL, 'f'},
	{"output", required_argument, NULL, 'o'},
	{"pid", required_argument, NULL, OPT_PID},
	{"tid", required_argument, NULL, OPT_TID},
	{"force", no_argument, NULL, OPT_FORCE},
	{"children", no_argument, NULL, OPT_CHILDREN},
	{"last", required_argument, NULL, OPT_LAST},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

/*
 * A format of the PyTorch timeline (@x->write_trace): python.torch_trace of a live target
 * (@pid_arg/@t_arg) or the torch_trace table of the recording @input, to @output. Return an
 * exit status.
 */
static int export_trace(const struct export_format *x, const char *input, const char *pid_arg,
			const char *t_arg, const char *output, unsigned int out_flags)
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
	err = x->write_trace(db, table, outfile__fp(of), &n);
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

/*
 * A format of the PyTorch timeline from every process of a job (-p PID,PID... or
 * --children): python.torch_trace of each, put together (jobsql.h). Return an exit status.
 */
static int export_trace_job(const struct export_format *x, const char *pid_arg, const char *t_arg,
			    bool children, const char *output, unsigned int out_flags)
{
	struct jobsql_result r = {0};
	struct job_procs j = {0};
	struct outfile *of = NULL;
	struct strbuf view = {0};
	long long n = 0;
	int rc, err, ret = EXIT_FAIL;

	rc = livejob__from_opts("export", pid_arg, t_arg, children, true, &j);
	if (rc)
		return rc;
	/* The output first: a file that may not be written is refused before any work. */
	if (outfile__open(output, out_flags, &of))
		goto cleanup;
	livejob__note_unreadable("export", &j);
	if (jobsql__run("export", &j, "SELECT * FROM python.torch_trace", LIVE_GIL_TIMEOUT_MS, &r))
		goto cleanup;
	if (!r.n) {
		pr_warn("no process of the job has PyTorch hooks: install them with 'probing "
			"inject -p PID --children --torch'");
		goto cleanup;
	}
	if (sb_printf(&view, "CREATE TEMP VIEW job_trace AS %s", r.select[0]) ||
	    sqlite3_exec(r.db, sb_str(&view), NULL, NULL, NULL) != SQLITE_OK) {
		pr_warn("cannot put the ranks' traces together: %s", sqlite3_errmsg(r.db));
		goto cleanup;
	}
	err = x->write_trace(r.db, "job_trace", outfile__fp(of), &n);
	if (err) {
		if (err == -ENOENT)
			pr_warn("no rows in python.torch_trace of any process: let a few training "
				"steps run after 'probing inject --torch'");
		else
			pr_warn("cannot write %s: %s", output,
				err == -ENOMEM ? "out of memory" : strerror(errno ? errno : EIO));
		goto cleanup;
	}
	err = outfile__commit(of);
	of = NULL;
	if (!err) {
		pr_info("%lld events from %d processes written to %s", n, j.n, output);
		ret = EXIT_OK;
	}
cleanup:
	outfile__abort(of);
	sb_free(&view);
	jobsql__free(&r);
	livejob__free(&j);
	return ret;
}

/*
 * A format of the samples (@x->write_samples) of the recording @input (its last @last_s
 * seconds if > 0), only those @flt selects, to @output. Return an exit status.
 */
static int export_samples(const struct export_format *x, const char *input, double last_s,
			  struct profile_filter *flt, const char *output, unsigned int out_flags)
{
	struct outfile *of = NULL;
	struct profile *prof = NULL;
	sqlite3 *db = NULL;
	int err, ret = EXIT_FAIL;

	/* The output first: a file that may not be written is refused before any work. */
	if (outfile__open(output, out_flags, &of))
		goto cleanup;
	if (recwindow__open(input, RECORDING_SAMPLES, last_s, &db, NULL))
		goto cleanup;
	flt->flags |= x->load_flags;
	err = profile__load(db, flt, &prof);
	if (err) {
		if (err == -ENOMEM)
			pr_warn("out of memory reading %s", input);
		goto cleanup;
	}
	if (!prof->total) {
		profile__explain_empty(db, input, flt);
		goto cleanup;
	}
	err = x->write_samples(prof, input, outfile__fp(of));
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

int cmd_export(int argc, char **argv)
{
	const char *input = "probing.db", *output = NULL, *pid_arg = NULL, *t_arg = NULL;
	const struct export_format *x = NULL;
	bool input_given = false;
	struct profile_filter flt = {0};
	unsigned int out_flags = OUTFILE_FORCE_HINT;
	bool children = false;
	double last_s = 0;
	char names[256];
	int c;

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
			x = export_format__find(optarg);
			if (!x)
				return cli_usage_error("export", "unknown --format '%s': use %s",
						       optarg,
						       format_names(OF_SAMPLES | OF_TRACE, ", ",
								    " or ", names, sizeof(names)));
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
		case OPT_CHILDREN:
			children = true;
			break;
		case OPT_LAST:
			if (cli_parse_last("export", optarg, &last_s))
				return EXIT_USAGE;
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
	if (!x)
		return cli_usage_error(
			"export", "say which format: --format %s",
			format_names(OF_SAMPLES | OF_TRACE, ", ", " or ", names, sizeof(names)));
	if (!output)
		return cli_usage_error("export", "say where to write: -o FILE ('-o -' for stdout)");
	if ((pid_arg || t_arg) && !x->write_trace)
		return cli_usage_error("export",
				       "-p/-t read a live process: only --format %s (its PyTorch "
				       "timeline) comes from there; the others need a recording "
				       "(-i FILE). To keep one process's samples of a recording, "
				       "the option is --pid N: 'probing export -i %s --format %s "
				       "--pid %s -o %s'",
				       format_names(OF_TRACE, ", ", " or ", names, sizeof(names)),
				       input_given ? input : "FILE", x->name,
				       pid_arg ? pid_arg : "N", output ? output : "OUT");
	if ((pid_arg || t_arg) && input_given)
		return cli_usage_error("export", "give either -i FILE or -p PID, not both");
	if (x->write_trace && (flt.pid || flt.tid))
		return cli_usage_error("export",
				       "--pid/--tid keep some samples of a recording; the PyTorch "
				       "timeline (--format %s) is filtered with SQL instead (query "
				       "--save). A live process is -p PID: 'probing export -p %d "
				       "--format %s -o OUT'",
				       x->name, (int)(flt.pid ? flt.pid : flt.tid), x->name);
	if (last_s > 0 && (x->write_trace || pid_arg || t_arg))
		return cli_usage_error("export",
				       "--last keeps the last samples of a recording "
				       "(-i FILE or -i DIR), not of the PyTorch timeline");
	if (children && !pid_arg && !t_arg)
		return cli_usage_error("export", "--children goes with -p PID (a job's processes)");
	if (x->write_trace && livejob__wanted(pid_arg ? pid_arg : t_arg, children))
		return export_trace_job(x, pid_arg, t_arg, children, output, out_flags);
	if (x->write_trace)
		return export_trace(x, input, pid_arg, t_arg, output, out_flags);
	if (x->binary && !strcmp(output, "-") && stdout_is_tty())
		return cli_usage_error("export",
				       "%s is binary: write it to a file (-o FILE), or redirect "
				       "stdout",
				       x->name);
	return export_samples(x, input, last_s, &flt, output, out_flags);
}

COMMAND(export, cmd_export, "write a recording as pprof, folded stacks or speedscope JSON", 40);
