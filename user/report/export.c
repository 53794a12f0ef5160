// SPDX-License-Identifier: MIT
/* The formats of 'probing export' (export.h): the table, and the writers it adapts. */
#include <errno.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "report/export.h"
#include "report/flamegraph.h"
#include "report/pprof.h"
#include "report/speedscope.h"
#include "report/torchtrace.h"

/* pprof: CPU time needs the sampling frequency, which old recordings may not say. */
static int write_pprof(const struct profile *p, const char *input, FILE *f)
{
	struct strbuf pb = {0};
	double hz = p->frequency;
	int err;

	if (hz <= 0) {
		pr_warn("%s does not say its sampling frequency; computing CPU time at %d Hz",
			input, PROBING_DEFAULT_HZ);
		hz = PROBING_DEFAULT_HZ;
	}
	err = pprof__encode(p, hz, &pb);
	if (!err)
		err = pprof__gzip(f, pb.buf, pb.len);
	sb_free(&pb);
	return err;
}

/* Folded stacks: what 'probing flamegraph --folded' prints, through the same call tree. */
static int write_folded(const struct profile *p, const char *input, FILE *f)
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

const struct export_format export_formats[] = {
	{
		.name = "pprof",
		.help = "gzipped profile.proto, for 'go tool pprof', Pyroscope, Parca: sample\n"
			"types samples/count and cpu/nanoseconds (wall/nanoseconds for record\n"
			"--off-cpu, with a state label), functions, locations with lines,\n"
			"labels pid, tid, thread and (a process of a job) rank\n",
		.write_samples = write_pprof,
		.binary = true,
	},
	{
		.name = "folded",
		.help = "folded stacks, \"root;...;leaf COUNT\" (flamegraph.pl, inferno); the\n"
			"same as 'probing flamegraph --folded'\n",
		.write_samples = write_folded,
	},
	{
		.name = "speedscope",
		.help = "speedscope's JSON (https://www.speedscope.app): one profile per\n"
			"thread, samples in time order (one-second resolution)\n",
		.write_samples = speedscope__write,
		.load_flags = PROFILE_BY_TIME,
	},
	{
		.name = "chrome",
		.help = "the PyTorch hooks' per-module timeline (python.torch_trace, see\n"
			"'probing inject --torch') as Chrome trace JSON for Perfetto\n"
			"(https://ui.perfetto.dev) or chrome://tracing: one complete event\n"
			"per module call and optimizer step, nested by time on a track per\n"
			"process and thread, and a track of the steps. From a live process\n"
			"(-p PID) or from a file saved with 'probing query -p PID --save'\n",
		.write_trace = torchtrace__chrome,
	},
	{NULL},
};

const struct export_format *export_format__find(const char *name)
{
	const struct export_format *x;

	for (x = export_formats; x->name; x++)
		if (!strcmp(x->name, name))
			return x;
	return NULL;
}
