// SPDX-License-Identifier: MIT
/* probing flamegraph: a recording as an interactive SVG flame graph, or as folded stacks. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/escape.h"
#include "report/flamegraph.h"
#include "base/log.h"
#include "base/outfile.h"
#include "report/profile.h"
#include "report/rankpanels.h"
#include "report/recording.h"
#include "base/util.h"
#include "report/recwindow.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing flamegraph [-i FILE] [-o OUT.svg] [--folded] [--pid N] [--tid N]\n"
		"                          [--rank N] [--last DURATION] [--from SEC] [--to SEC]\n"
		"                          [--state STATE]\n"
		"                          [--diff OTHER.db] [--diff-ranks A,B] [--by rank]\n"
		"                          [--title T] [--width PX] [--min-width PX] [--inverted]\n"
		"                          [--no-lines] [--force]\n"
		"\n"
		"Draw the samples of a recording as a flame graph: an interactive SVG to open in "
		"a\n"
		"browser. Each box is a function; its width is the share of samples in which it "
		"was\n"
		"on the stack, callers below callees. Hover for details, click to zoom in, 'Reset\n"
		"Zoom' (or Escape) to zoom out, 'Search' (or Ctrl-F) to highlight frames matching "
		"a\n"
		"regular expression and see the share of samples they cover. Python frames are "
		"blue,\n"
		"native code warm colours, the kernel violet. See docs/flamegraph.md.\n"
		"A recording made with 'record --off-cpu' gives a wall-clock flame graph: widths\n"
		"are time, on the CPU and off it; each off-CPU stack ends in a frame naming its\n"
		"state ([off-CPU: lock], a colour per state, in the legend), frames whose time is\n"
		"all off-CPU are faded, and tooltips give seconds per state.\n"
		"\n"
		"Options:\n"
		"  -i, --input FILE    the recording to read (default: probing.db), or the\n"
		"                      directory of a 'probing watch -o DIR': what it keeps\n"
		"      --last DURATION only the last DURATION of the recording (90s, 5m, 2h),\n"
		"                      back from its latest second sampled (of OTHER.db too,\n"
		"                      with --diff)\n"
		"  -o, --output FILE   write to FILE instead of stdout ('-'; an SVG is not "
		"written\n"
		"                      to a terminal); an existing file is replaced only once\n"
		"                      the new one is complete, keeping its permissions; a\n"
		"                      symbolic link is followed; devices and FIFOs are written\n"
		"                      in place, directories refused\n"
		"      --force         replace FILE even if it is read-only\n"
		"      --folded        print folded stacks instead of an SVG: one line per "
		"distinct\n"
		"                      stack, \"root;...;leaf COUNT\", sorted (for flamegraph.pl,\n"
		"                      speedscope, diff, grep)\n"
		"      --pid N         only the samples of process N\n"
		"      --tid N         only the samples of thread N\n"
		"      --rank N        only the processes of distributed rank N (processes.rank)\n"
		"      --from SEC, --to SEC\n"
		"                      only the samples from SEC seconds after the recording\n"
		"                      started, up to SEC (samples are timed to the second: a\n"
		"                      second that overlaps the range is kept)\n"
		"      --state STATE   only samples in thread state STATE (running, runnable,\n"
		"                      sleep, lock, io, gil, other), for recordings that have\n"
		"                      states (record --off-cpu)\n"
		"      --diff OTHER.db a differential flame graph: drawn from FILE, coloured by\n"
		"                      how each frame's share of samples changed from OTHER.db\n"
		"                      (the baseline): red grew, blue shrank; filters apply to "
		"both\n"
		"      --diff-ranks A,B  the same between two ranks: rank A (of OTHER.db with\n"
		"                      --diff, else of FILE) is the baseline, rank B is drawn.\n"
		"                      With --folded: \"stack BASELINE COUNT\" lines (difffolded)\n"
		"      --by rank       one flame graph per distributed rank, side by side in one\n"
		"                      SVG (each scaled to its rank's samples, headed \"rank 3\n"
		"                      (pid 1234)\"; processes without a rank last), the rank\n"
		"                      that entered most collectives last (the late rank), else\n"
		"                      the one furthest from the median rank, flagged with the\n"
		"                      function where it spends its extra time (the view\n"
		"                      rank_deviation; a late rank's time is seen with\n"
		"                      record --off-cpu);\n"
		"                      search shows the share matched in each rank. With\n"
		"                      --folded: lines led by a frame \"rank N\"\n"
		"      --title T       the title of the graph (default: \"Flame Graph\")\n"
		"      --width PX      width of the image in pixels (default: 1200)\n"
		"      --min-width PX  leave out frames narrower than PX pixels, and what they "
		"call\n"
		"                      (default: 0.1%% of the width); --folded keeps every stack\n"
		"      --inverted      icicle graph: the root at the top, callees below callers\n"
		"      --no-lines      one frame per Python function, whatever line it was at\n"
		"                      (\"train (app.py)\" instead of one per line)\n"
		"  -h, --help          show this help\n"
		"\n"
		"From py-spy: --nolineno is --no-lines; --threads (a graph per thread) is --tid N\n"
		"for one thread ('probing query -i FILE \"SELECT tid, thread, SUM(count) FROM\n"
		"samples GROUP BY tid\"' lists them); --idle (idle threads too) is a recording "
		"made\n"
		"with 'record --off-cpu', whose waits are drawn, or left out with --state "
		"running.\n"
		"\n"
		"Examples:\n"
		"  probing flamegraph -i app.db -o app.svg\n"
		"  probing flamegraph -i app.db --pid 1234 --title 'trainer, rank 0' -o rank0.svg\n"
		"  probing flamegraph -i app.db --folded | grep -F 'forward (' | head\n"
		"  probing flamegraph -i app.db --from 30 --to 40 -o slow-phase.svg\n"
		"  probing flamegraph -i /var/tmp/watch --last 5m -o last-5-minutes.svg\n"
		"  probing flamegraph -i job.db --diff-ranks 0,3 -o rank3-vs-rank0.svg\n"
		"  probing flamegraph -i job.db --by rank -o ranks.svg\n"
		"  probing flamegraph -i after.db --diff before.db -o diff.svg\n");
}

enum {
	OPT_FOLDED = 256,
	OPT_PID,
	OPT_TID,
	OPT_TITLE,
	OPT_WIDTH,
	OPT_MIN_WIDTH,
	OPT_INVERTED,
	OPT_FORCE,
	OPT_RANK,
	OPT_FROM,
	OPT_TO,
	OPT_STATE,
	OPT_DIFF,
	OPT_DIFF_RANKS,
	OPT_BY,
	OPT_NO_LINES,
	OPT_LAST,
};

static const struct option options[] = {
	{"input", required_argument, NULL, 'i'},
	{"output", required_argument, NULL, 'o'},
	{"folded", no_argument, NULL, OPT_FOLDED},
	{"pid", required_argument, NULL, OPT_PID},
	{"tid", required_argument, NULL, OPT_TID},
	{"title", required_argument, NULL, OPT_TITLE},
	{"width", required_argument, NULL, OPT_WIDTH},
	{"min-width", required_argument, NULL, OPT_MIN_WIDTH},
	{"inverted", no_argument, NULL, OPT_INVERTED},
	{"force", no_argument, NULL, OPT_FORCE},
	{"rank", required_argument, NULL, OPT_RANK},
	{"from", required_argument, NULL, OPT_FROM},
	{"to", required_argument, NULL, OPT_TO},
	{"state", required_argument, NULL, OPT_STATE},
	{"diff", required_argument, NULL, OPT_DIFF},
	{"diff-ranks", required_argument, NULL, OPT_DIFF_RANKS},
	{"by", required_argument, NULL, OPT_BY},
	{"no-lines", no_argument, NULL, OPT_NO_LINES},
	{"last", required_argument, NULL, OPT_LAST},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

#define NO_END 1e18 /* --from without --to: to the end */

/* "12,345 samples at 99 Hz · pid 1234 (python train.py) · tid 1240 (loader) · app.db" */
static int subtitle(struct strbuf *sb, const struct profile *p, const struct profile_filter *flt,
		    const char *input)
{
	const struct profile_process *pr;
	struct strbuf tmp = {0};
	const char *cmd, *thread;
	char n[32];
	size_t i;
	int err;

	fmt_thousands(n, sizeof(n), p->total);
	/* Off-CPU recordings: weighed by time, on the CPU and off it. */
	err = p->wall ? sb_printf(sb, "%.3f s of wall-clock time \xc2\xb7 ", p->total_ns / 1e9) : 0;
	err = err ?: sb_printf(sb, "%s sample%s", n, p->total == 1 ? "" : "s");
	if (!err && p->frequency > 0)
		err = sb_printf(sb, " at %g Hz", p->frequency);
	/* The command and thread names come from the recording: escaped (escape.h). A process
	 * of a job is named by its rank: "rank 3 (pid 1234, python train.py)". */
	if (!err && flt->pid) {
		cmd = profile__command(p, flt->pid);
		pr = profile__process(p, flt->pid);
		if (pr && pr->rank >= 0)
			err = sb_printf(sb, " \xc2\xb7 rank %d (pid %d%s%s)", pr->rank,
					(int)flt->pid, cmd ? ", " : "",
					cmd ? text_str(&tmp, cmd, 0) : "");
		else
			err = sb_printf(sb, " \xc2\xb7 pid %d%s%s%s", (int)flt->pid,
					cmd ? " (" : "", cmd ? text_str(&tmp, cmd, 0) : "",
					cmd ? ")" : "");
	}
	if (!err && flt->tid) {
		thread = p->nsamples ? profile__thread_name(p, p->samples[0].pid, flt->tid) : NULL;
		err = sb_printf(sb, " \xc2\xb7 tid %d%s%s%s", (int)flt->tid, thread ? " (" : "",
				thread ? text_str(&tmp, thread, 0) : "", thread ? ")" : "");
	}
	if (!err && (flt->flags & PROFILE_RANK) && !flt->pid) {
		/* "rank 3 (pid 1234)" when one process has its samples. */
		for (i = 1; i < p->nsamples && p->samples[i].pid == p->samples[0].pid; i++)
			;
		if (p->nsamples && i == p->nsamples)
			err = sb_printf(sb, " \xc2\xb7 rank %d (pid %d)", flt->rank,
					(int)p->samples[0].pid);
		else
			err = sb_printf(sb, " \xc2\xb7 rank %d", flt->rank);
	}
	if (!err && (flt->flags & PROFILE_RANGE))
		err = flt->to >= NO_END
			      ? sb_printf(sb, " \xc2\xb7 from %g s", flt->from)
			      : sb_printf(sb, " \xc2\xb7 %g s to %g s", flt->from, flt->to);
	if (!err && flt->state)
		err = sb_printf(sb, " \xc2\xb7 %s", flt->state);
	if (!err)
		err = sb_printf(sb, " \xc2\xb7 %s", text_str(&tmp, input, 0));
	sb_free(&tmp);
	return err;
}

/* " · baseline: rank 0 of before.db" */
static int subtitle_baseline(struct strbuf *sb, const struct profile_filter *base,
			     const char *base_input, const char *input)
{
	struct strbuf tmp = {0};
	int err;

	err = sb_puts(sb, " \xc2\xb7 baseline:");
	if (!err && (base->flags & PROFILE_RANK))
		err = sb_printf(sb, " rank %d%s", base->rank,
				strcmp(base_input, input) ? " of" : "");
	if (!err && strcmp(base_input, input))
		err = sb_printf(sb, " %s", text_str(&tmp, base_input, 0));
	sb_free(&tmp);
	return err;
}

/* " · 3 ranks · furthest from the median: rank 1", or "· rank 1 entered last in 60 of 61 collectives" */
static int subtitle_ranks(struct strbuf *sb, const struct rankpanels *rp)
{
	int err;

	err = sb_printf(sb, " \xc2\xb7 %zu rank%s", rp->nranks, rp->nranks == 1 ? "" : "s");
	if (!err && rp->flag && rp->flag->late)
		err = sb_printf(sb,
				" \xc2\xb7 rank %d entered last in %" PRIu64 " of %" PRIu64
				" collectives",
				rp->flagged, rp->flag->entered_last, rp->flag->collectives);
	else if (!err && rp->flagged >= 0)
		err = sb_printf(sb, " \xc2\xb7 furthest from the median: rank %d", rp->flagged);
	return err;
}

/*
 * Load @input (its last @last_s seconds if > 0) with @flt into *@prof, and the comparison
 * of its ranks into *@dev; build the panels of --by rank into @rp. Return 0, or -ENODATA / -errno with the reason printed.
 */
static int load_by_rank(const char *input, double last_s, const struct profile_filter *flt,
			struct profile **prof, struct profile_rank_deviation **dev, size_t *ndev,
			struct rankpanels *rp)
{
	sqlite3 *db = NULL;
	int err;

	if (recwindow__open(input, RECORDING_SAMPLES, last_s, &db, NULL))
		return -EIO;
	err = profile__load(db, flt, prof);
	if (!err && !(*prof)->total) {
		profile__explain_empty(db, input, flt);
		err = -ENODATA;
	} else if (!err) {
		err = profile__rank_deviation(db, flt, dev, ndev);
	}
	if (!err) {
		err = rankpanels__build(*prof, *dev, *ndev, rp);
		if (err == -ENODATA)
			pr_warn("%s has no samples of processes with a rank (RANK, SLURM_PROCID, "
				"OMPI_COMM_WORLD_RANK or PMI_RANK in their environment): there is "
				"nothing to draw by rank; 'probing query -i %s \"SELECT * FROM "
				"processes\"' shows the processes",
				input, input);
	}
	if (err == -ENOMEM)
		pr_warn("out of memory reading %s", input);
	recording__close(db);
	return err;
}

/* Parse "A,B" (two ranks, non-negative integers). 0 or -EINVAL. */
static int parse_rank_pair(const char *s, int *a, int *b)
{
	char first[32];
	const char *comma = strchr(s, ',');
	long v, w;

	if (!comma || (size_t)(comma - s) >= sizeof(first))
		return -EINVAL;
	memcpy(first, s, comma - s);
	first[comma - s] = '\0';
	if (parse_long(first, 0, INT_MAX, &v) || parse_long(comma + 1, 0, INT_MAX, &w))
		return -EINVAL;
	*a = v;
	*b = w;
	return 0;
}

/*
 * Load the recording @input open on @db with @flt into *@prof. Return 0, or -ENODATA when it
 * selects no samples (the reason printed), or another -errno (printed).
 */
static int load(sqlite3 *db, const char *input, const struct profile_filter *flt,
		struct profile **prof)
{
	int err;

	err = profile__load(db, flt, prof);
	if (err == -ENOMEM)
		pr_warn("out of memory reading %s", input);
	if (!err && !(*prof)->total) {
		profile__explain_empty(db, input, flt);
		profile__free(*prof);
		*prof = NULL;
		err = -ENODATA;
	}
	return err;
}

int cmd_flamegraph(int argc, char **argv)
{
	const char *input = "probing.db", *output = "-", *diff_input = NULL;
	struct profile_filter flt = {0}, base_flt;
	struct profile *base = NULL;
	struct profile_rank_deviation *dev = NULL;
	struct rankpanels rp = {.flagged = -1};
	size_t ndev = 0;
	bool diff_ranks = false, from_given = false, to_given = false, by_rank = false;
	int rank_a = 0, rank_b = 0;
	double secs, last_s = 0;
	struct fg_options fo = {0};
	struct strbuf text = {0}, sub = {0};
	struct outfile *of = NULL;
	struct profile *prof = NULL;
	struct fg *g = NULL;
	sqlite3 *db = NULL, *diff_db = NULL;
	unsigned int out_flags = OUTFILE_FORCE_HINT;
	bool folded = false;
	int c, ret = EXIT_FAIL, err;
	long v;
	char *end;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, ":i:o:h", options, NULL)) != -1) {
		switch (c) {
		case 'i':
			input = optarg;
			break;
		case 'o':
			output = optarg;
			break;
		case OPT_FOLDED:
			folded = true;
			break;
		case OPT_PID:
			if (cli_parse_id("flamegraph", "--pid", optarg, &flt.pid))
				return EXIT_USAGE;
			break;
		case OPT_TID:
			if (cli_parse_id("flamegraph", "--tid", optarg, &flt.tid))
				return EXIT_USAGE;
			break;
		case OPT_TITLE:
			fo.title = optarg;
			break;
		case OPT_WIDTH:
			if (parse_long(optarg, 200, 100000, &v))
				return cli_usage_error("flamegraph",
						       "invalid --width '%s': expected pixels, "
						       "200 to 100000",
						       optarg);
			fo.width = v;
			break;
		case OPT_MIN_WIDTH:
			errno = 0;
			fo.min_width = strtod(optarg, &end);
			if (!*optarg || *end || errno ||
			    !(fo.min_width > 0 && fo.min_width <= 1000))
				return cli_usage_error("flamegraph",
						       "invalid --min-width '%s': expected pixels, "
						       "more than 0 (e.g. 0.5)",
						       optarg);
			break;
		case OPT_INVERTED:
			fo.inverted = true;
			break;
		case OPT_FORCE:
			out_flags |= OUTFILE_FORCE;
			break;
		case OPT_RANK:
			if (parse_long(optarg, 0, INT_MAX, &v))
				return cli_usage_error("flamegraph",
						       "invalid --rank '%s': expected a rank, 0 or "
						       "more",
						       optarg);
			flt.flags |= PROFILE_RANK;
			flt.rank = v;
			break;
		case OPT_FROM:
		case OPT_TO:
			if (parse_seconds(optarg, 0, 1e9, &secs))
				return cli_usage_error(
					"flamegraph",
					"invalid %s '%s': expected seconds since the "
					"recording started (e.g. 12.5)",
					c == OPT_FROM ? "--from" : "--to", optarg);
			*(c == OPT_FROM ? &flt.from : &flt.to) = secs;
			*(c == OPT_FROM ? &from_given : &to_given) = true;
			break;
		case OPT_LAST:
			if (cli_parse_last("flamegraph", optarg, &last_s))
				return EXIT_USAGE;
			break;
		case OPT_STATE:
			if (profile__state_code(optarg, NULL))
				return cli_usage_error(
					"flamegraph",
					"unknown --state '%s': use running, runnable, "
					"sleep, lock, io, gil or other",
					optarg);
			flt.state = optarg;
			break;
		case OPT_DIFF:
			diff_input = optarg;
			break;
		case OPT_DIFF_RANKS:
			if (parse_rank_pair(optarg, &rank_a, &rank_b))
				return cli_usage_error(
					"flamegraph",
					"invalid --diff-ranks '%s': expected two ranks "
					"A,B (the baseline first), e.g. 0,3",
					optarg);
			diff_ranks = true;
			break;
		case OPT_NO_LINES:
			flt.flags |= PROFILE_NO_LINES;
			break;
		case OPT_BY:
			if (strcmp(optarg, "rank"))
				return cli_usage_error("flamegraph",
						       "invalid --by '%s': the one grouping there "
						       "is 'rank' (--by rank)",
						       optarg);
			by_rank = true;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return cli_bad_option("flamegraph", c, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("flamegraph", "unexpected argument '%s'", argv[optind]);
	if (from_given || to_given) {
		if (!to_given)
			flt.to = NO_END;
		if (flt.to <= flt.from)
			return cli_usage_error("flamegraph", "--to must be later than --from");
		flt.flags |= PROFILE_RANGE;
	}
	if (diff_ranks && (flt.flags & PROFILE_RANK))
		return cli_usage_error("flamegraph",
				       "give either --rank or --diff-ranks, not both");
	if (by_rank && (flt.flags & PROFILE_RANK))
		return cli_usage_error("flamegraph",
				       "--by rank draws every rank: leave out --rank (or --by rank "
				       "to draw one)");
	if (by_rank && (diff_ranks || diff_input))
		return cli_usage_error("flamegraph",
				       "--by rank draws the ranks side by side; a differential "
				       "graph (--diff, --diff-ranks) is drawn alone");
	/* SVG is a page of markup: on a terminal it is noise (export refuses binary the same). */
	if (!folded && !strcmp(output, "-") && stdout_is_tty())
		return cli_usage_error("flamegraph",
				       "an SVG flame graph is not for a terminal: write it to a "
				       "file (-o FILE.svg, then open it in a browser), redirect "
				       "stdout, or print text with --folded");
	base_flt = flt;
	if (diff_ranks) {
		base_flt.flags |= PROFILE_RANK;
		base_flt.rank = rank_a;
		flt.flags |= PROFILE_RANK;
		flt.rank = rank_b;
	}

	/* The output first: a file that may not be written is refused before any work. */
	if (outfile__open(output, out_flags, &of))
		goto cleanup;
	if (by_rank) {
		err = load_by_rank(input, last_s, &flt, &prof, &dev, &ndev, &rp);
		if (err)
			goto cleanup;
		if (folded) {
			err = rankpanels__folded(&rp, &text);
		} else {
			if (!fo.title)
				fo.title = "Flame Graphs by Rank";
			err = subtitle(&sub, prof, &flt, input);
			err = err ?: subtitle_ranks(&sub, &rp);
			fo.subtitle = sb_str(&sub);
			err = err ?: fg__svg_panels(rp.panels, rp.n, &fo, &text);
		}
		if (err)
			goto nomem;
		goto write;
	}
	/* Opened once (-i DIR or --last copy the span), also for the baseline of --diff-ranks. */
	if (recwindow__open(input, RECORDING_SAMPLES, last_s, &db, NULL) ||
	    load(db, input, &flt, &prof))
		goto cleanup;
	if (diff_input && recwindow__open(diff_input, RECORDING_SAMPLES, last_s, &diff_db, NULL))
		goto cleanup;
	if (diff_input || diff_ranks) {
		err = load(diff_input ? diff_db : db, diff_input ? diff_input : input, &base_flt,
			   &base);
		if (err == -ENODATA)
			pr_warn("the baseline of the differential flame graph has no samples to "
				"compare with");
		if (err)
			goto cleanup;
	}
	g = fg__new();
	if (!g)
		goto nomem;
	err = fg__add_profile(g, prof);
	if (!err && base)
		err = fg__add_profile_base(g, base);
	if (err)
		goto nomem;
	if (folded) {
		err = fg__folded(g, &text);
	} else {
		err = subtitle(&sub, prof, &flt, input);
		if (!err && base)
			err = subtitle_baseline(&sub, &base_flt, diff_input ? diff_input : input,
						input);
		fo.subtitle = sb_str(&sub);
		if (!err)
			err = fg__svg(g, &fo, &text);
	}
	if (err)
		goto nomem;
write:
	if (text.len && fwrite(text.buf, 1, text.len, outfile__fp(of)) != text.len) {
		pr_warn("cannot write %s: %s", output, strerror(errno));
		goto cleanup;
	}
	err = outfile__commit(of);
	of = NULL;
	if (err)
		goto cleanup;
	if (strcmp(output, "-"))
		pr_info("wrote %s (%zu bytes)", output, text.len);
	ret = EXIT_OK;
	goto cleanup;
nomem:
	pr_warn("out of memory drawing the flame graph of %s", input);
cleanup:
	outfile__abort(of);
	sb_free(&text);
	sb_free(&sub);
	fg__free(g);
	profile__free(prof);
	profile__free(base);
	rankpanels__free(&rp);
	profile__free_rank_deviation(dev, ndev);
	recording__close(db);
	recording__close(diff_db);
	return ret;
}

COMMAND(flamegraph, cmd_flamegraph, "draw a recording as an interactive flame graph (SVG)", 20);
