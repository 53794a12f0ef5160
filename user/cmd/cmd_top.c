// SPDX-License-Identifier: MIT
/* probing top: a live view of the hottest functions of processes, as py-spy top shows them. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/escape.h"
#include "base/log.h"
#include "base/util.h"
#include "record/preflight.h"
#include "record/session.h"
#include "report/topview.h"

#define CMD "top"

static const char usage_text[] =
	"Usage: probing top [OPTIONS] -p PID[,PID...] [--children]\n"
	"\n"
	"A live view of where processes spend their time, as py-spy top shows it: the hottest\n"
	"functions with their own time (the function itself was running or waiting) and total\n"
	"time (it was on the stack), refreshed every second. Python functions are shown with\n"
	"their file and the line where each spends the most time; native code called from\n"
	"Python counts in the Python function that called it (--native: shown too), native\n"
	"functions are shown for stacks without Python frames (a native thread, a native\n"
	"program). Threads off their CPU count too\n"
	"(wall-clock time, py-spy's --idle): the first line splits the time by state (running,\n"
	"lock, sleep, io, gil, runnable, other) and the Wait column says how much of each\n"
	"function's time is spent waiting, and in which state the most. Times add up since\n"
	"the start (or the last R); the shares are of all the time of every thread shown.\n"
	"With --children, a whole job (-p <torchrun pid>): every rank, and 'r' shows one rank\n"
	"at a time. It samples as 'probing record' does (into a temporary recording, removed\n"
	"at the end); the processes are not stopped or changed, and quitting detaches.\n"
	"Needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE).\n"
	"\n"
	"Keys (on a terminal): q quit (or Ctrl-C), r next rank (all, 0, 1, ...), i waits shown\n"
	"or not (on-CPU time only), n native functions shown or not, 1 sort by own time, 2 sort by "
	"total time, R reset the\n"
	"times. The screen is drawn with plain ANSI escapes (any terminal, over SSH) and\n"
	"restored on quitting.\n"
	"When standard output is not a terminal, or with --once, no screen is drawn: the table\n"
	"is printed as text, every second (a blank line and a title line between tables), or\n"
	"once at the end with --once (after -d, Ctrl-C, or when every process has exited).\n"
	"\n"
	"Options:\n"
	"  -p, --pid PID[,PID...]  processes to watch\n"
	"      --children          also their descendants, now and later (every rank of a job)\n"
	"  -F, --freq HZ           samples per second, 1-1000 (default " PROBING_DEFAULT_HZ_STR
	")\n"
	"  -d, --duration SECONDS  stop after this long (default: until q, Ctrl-C or exit)\n"
	"      --once              print the table once, at the end (scripts, tests)\n"
	"  -n, --rows N            functions in a printed table (default 20; on a terminal,\n"
	"                          as many as fit)\n"
	"      --rank N            only rank N's processes (default: all; key r)\n"
	"      --on-cpu            only time on a CPU, as py-spy top without --idle (key i)\n"
	"      --sort own|total    order by own time (default) or total time (keys 1, 2)\n"
	"      --native            native functions of Python stacks too (key n)\n"
	"  -v, --verbose           more diagnostics\n"
	"  -h, --help              this help\n"
	"\n"
	"Examples:\n"
	"  sudo probing top -p 1234\n"
	"  sudo probing top -p $(pgrep -o -f bin/torchrun) --children\n"
	"  sudo probing top -p 1234 -d 5 --once --on-cpu     # a table in a script\n";

enum {
	OPT_CHILDREN = 256,
	OPT_ONCE,
	OPT_RANK,
	OPT_ON_CPU,
	OPT_SORT,
	OPT_NATIVE,
};

static const struct option long_opts[] = {
	{"pid", required_argument, NULL, 'p'},
	{"children", no_argument, NULL, OPT_CHILDREN},
	{"freq", required_argument, NULL, 'F'},
	{"duration", required_argument, NULL, 'd'},
	{"once", no_argument, NULL, OPT_ONCE},
	{"rows", required_argument, NULL, 'n'},
	{"rank", required_argument, NULL, OPT_RANK},
	{"on-cpu", no_argument, NULL, OPT_ON_CPU},
	{"sort", required_argument, NULL, OPT_SORT},
	{"native", no_argument, NULL, OPT_NATIVE},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{},
};

struct top {
	struct session_opts so;
	struct topview_opts vo;
	struct topview tv;
	struct strbuf out;
	bool screen;  /* drawing on the terminal (else printing text) */
	bool keys;    /* reading keys from the terminal on stdin */
	bool once;    /* printing once at the end */
	bool quit;    /* 'q' */
	int rows;     /* functions in a printed table */
	double start; /* CLOCK_MONOTONIC seconds */
	int tables;   /* printed so far */
};

/* The terminal as it was, restored at exit whatever happens (atexit). */
static struct termios saved_tty;
static bool tty_saved, screen_on;

static void restore_terminal(void)
{
	if (screen_on) {
		/* Cursor shown, attributes reset, the normal screen back. */
		static const char leave[] = "\033[?25h\033[0m\033[?1049l";

		if (write(STDOUT_FILENO, leave, sizeof(leave) - 1) < 0) {
			/* nothing more to do */
		}
		screen_on = false;
	}
	if (tty_saved) {
		tcsetattr(STDIN_FILENO, TCSADRAIN, &saved_tty);
		tty_saved = false;
	}
}

/* The alternate screen; keys one at a time, unechoed (Ctrl-C still a signal). */
static void enter_terminal(struct top *t)
{
	static const char enter[] = "\033[?1049h\033[?25l\033[2J\033[H";
	struct termios raw;

	atexit(restore_terminal);
	if (t->keys && !tcgetattr(STDIN_FILENO, &saved_tty)) {
		raw = saved_tty;
		raw.c_lflag &= ~(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		raw.c_cc[VSUSP] = _POSIX_VDISABLE; /* stopped, it would leave the screen raw */
		if (!tcsetattr(STDIN_FILENO, TCSADRAIN, &raw))
			tty_saved = true;
		else
			t->keys = false;
	}
	if (t->screen) {
		if (write(STDOUT_FILENO, enter, sizeof(enter) - 1) >= 0)
			screen_on = true;
	}
}

static void term_size(int *cols, int *lines)
{
	struct winsize ws;

	*cols = 80;
	*lines = 24;
	if (!ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_col && ws.ws_row) {
		*cols = ws.ws_col;
		*lines = ws.ws_row;
	}
}

static int get_text(void *ctx, int n, const char *const *v)
{
	struct strbuf *sb = ctx;

	if (n >= 1 && v[0] && !sb->len)
		return text_escape(sb, v[0], strlen(v[0]), 0);
	return 0;
}

/* The title: what is shown, since when, the rank and the order. */
static int title(struct top *t, struct session *s, struct strbuf *sb)
{
	const struct session_opts *o = &t->so;
	struct strbuf cmd = {0};
	char sql[128];
	int err, i;

	snprintf(sql, sizeof(sql), "SELECT command FROM processes WHERE pid = %d", (int)o->pids[0]);
	store__select(session__store(s), sql, get_text, &cmd);
	err = sb_printf(sb, "probing top: pid %d", (int)o->pids[0]);
	for (i = 1; !err && i < o->npids && i < 4; i++)
		err = sb_printf(sb, ",%d", (int)o->pids[i]);
	if (!err && o->npids > 4)
		err = sb_puts(sb, ",...");
	if (!err && cmd.len)
		err = sb_printf(sb, " (%.60s)", sb_str(&cmd));
	if (!err && o->sampling.children)
		err = sb_puts(sb, " and descendants");
	if (!err)
		err = sb_printf(sb, " | %.0f s at %u Hz | rank: ", now_mono_ns() / 1e9 - t->start,
				o->sampling.freq);
	if (!err && t->vo.rank < 0)
		err = t->tv.nranks ? sb_puts(sb, "all") : sb_puts(sb, "- (no ranks)");
	else if (!err)
		err = sb_printf(sb, "%d", t->vo.rank);
	for (i = 0; !err && i < t->tv.nranks && t->vo.rank < 0; i++)
		err = sb_printf(sb, "%s%d%s", i ? "," : " (", t->tv.ranks[i],
				i == t->tv.nranks - 1 ? ")" : "");
	if (!err)
		err = sb_puts(sb, "\n");
	sb_free(&cmd);
	return err;
}

/* Cut each line of @in to @cols columns (the title may be long) into @sb, ending in "\033[K". */
static int screen_lines(struct strbuf *sb, const char *in, int cols, int max_lines)
{
	const char *p = in, *nl;
	int err = 0, n = 0;
	size_t len, w, i;

	while (!err && *p && n < max_lines) {
		nl = strchr(p, '\n');
		len = nl ? (size_t)(nl - p) : strlen(p);
		for (i = 0, w = 0; i < len;) {
			size_t k = 1;

			while (i + k < len && ((unsigned char)p[i + k] & 0xc0) == 0x80)
				k++;
			w += utf8_width(p + i, k);
			if ((int)w > cols)
				break;
			i += k;
		}
		err = sb_append(sb, p, i);
		if (!err)
			err = sb_puts(sb, n + 1 < max_lines ? "\033[K\r\n" : "\033[K");
		n++;
		p = nl ? nl + 1 : p + len;
	}
	return err ? err : sb_puts(sb, "\033[J");
}

/* Read the recording and draw the screen, or print the table. 0 or -errno. */
static int show(struct top *t, struct session *s)
{
	struct strbuf body = {0};
	int cols = 160, lines = 0, err;

	t->vo.limit = t->rows;
	if (t->screen) {
		term_size(&cols, &lines);
		t->vo.limit = lines > 5 ? lines - 5 : 1;
	}
	err = topview__read(session__store(s), &t->vo, &t->tv);
	if (err)
		return err;
	sb_reset(&t->out);
	err = title(t, s, &body);
	if (!err && t->screen)
		err = sb_printf(&body,
				"keys: q quit  r rank  i waits (%s)  n native (%s)  1/2 sort by "
				"own/total  R reset\n",
				t->vo.waits ? "shown" : "hidden",
				t->vo.native ? "shown" : "hidden");
	if (!err)
		err = topview__render(&t->tv, &t->vo, cols, t->screen ? lines - 2 : 0, &body);
	if (err)
		goto cleanup;
	if (t->screen) {
		err = sb_puts(&t->out, "\033[H");
		if (!err)
			err = screen_lines(&t->out, sb_str(&body), cols, lines);
	} else {
		err = t->tables++ ? sb_puts(&t->out, "\n") : 0;
		if (!err)
			err = sb_append(&t->out, body.buf, body.len);
	}
	if (!err && write_all(STDOUT_FILENO, t->out.buf, t->out.len))
		err = -errno;
cleanup:
	sb_free(&body);
	return err;
}

/* The next rank of the recording after the one shown (-1: all). */
static int next_rank(const struct topview *tv, int rank)
{
	int i;

	for (i = 0; i < tv->nranks; i++)
		if (tv->ranks[i] > rank)
			return tv->ranks[i];
	return -1;
}

/* Handle the keys typed; return true when the screen must be drawn again. */
static bool read_keys(struct top *t, struct session *s)
{
	struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
	bool redraw = false;
	char buf[32];
	ssize_t n, i;

	if (poll(&pfd, 1, 0) <= 0)
		return false;
	n = read(STDIN_FILENO, buf, sizeof(buf));
	if (n <= 0) {
		t->keys = false; /* end of input: keys are not read any more */
		return false;
	}
	for (i = 0; i < n; i++) {
		switch (buf[i]) {
		case 'q':
		case 'Q':
			t->quit = true;
			return false;
		case 'r':
			t->vo.rank = next_rank(&t->tv, t->vo.rank);
			redraw = true;
			break;
		case 'i':
			t->vo.waits = !t->vo.waits;
			redraw = true;
			break;
		case 'n':
			t->vo.native = !t->vo.native;
			redraw = true;
			break;
		case '1':
			t->vo.by_total = false;
			redraw = true;
			break;
		case '2':
			t->vo.by_total = true;
			redraw = true;
			break;
		case 'R':
			t->vo.since = topview__mark(session__store(s));
			t->start = now_mono_ns() / 1e9;
			redraw = true;
			break;
		}
	}
	return redraw;
}

static int on_turn(void *ctx, struct session *s, bool second)
{
	struct top *t = ctx;
	bool redraw = false;
	int err;

	if (t->keys)
		redraw = read_keys(t, s);
	if (t->quit)
		return 1;
	if ((second || redraw || (t->screen && !t->tables++)) && !t->once) {
		err = show(t, s);
		if (err == -EPIPE)
			return 1; /* the reader is gone: nothing more to show */
		if (err)
			return err;
	}
	return 0;
}

/* mkdtemp'd directory for the recording; removed with what it holds by remove_temp. */
static int make_temp(char *dir, size_t size, char *file, size_t fsize)
{
	const char *tmp = getenv("TMPDIR");

	if (!tmp || !*tmp)
		tmp = "/tmp";
	if ((size_t)snprintf(dir, size, "%s/probing-top-XXXXXX", tmp) >= size || !mkdtemp(dir)) {
		log_cmd(CMD,
			"cannot make a temporary directory in %s: %s (set TMPDIR to a writable "
			"directory)",
			tmp, strerror(errno));
		return -errno;
	}
	snprintf(file, fsize, "%s/top.db", dir);
	return 0;
}

static void remove_temp(const char *dir, const char *file)
{
	static const char *const sfx[] = {
		"",	    ".partial",	    "-wal",	    "-shm",
		"-journal", ".partial-wal", ".partial-shm", ".partial-journal"};
	char path[PATH_MAX + 32];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(sfx); i++) {
		snprintf(path, sizeof(path), "%s%s", file, sfx[i]);
		unlink(path);
	}
	rmdir(dir);
}

int cmd_top(int argc, char **argv)
{
	struct top t = {
		.so =
			{
				.sampling = {.freq = PROBING_DEFAULT_HZ,
					     .stack_size = SAMPLER_MAX_STACK,
					     .python = true,
					     .off_cpu = true},
				.recorder = {.native = true, .py_depth = RECORDER_PY_DEPTH},
				.argc = argc,
				.argv = argv,
				.quiet = true,
			},
		.vo = {.waits = true, .rank = -1},
		.rows = 20,
	};
	char dir[PATH_MAX], file[PATH_MAX + 16];
	struct record_totals tot;
	struct session *s = NULL;
	pid_t *pids = NULL;
	int npids = 0, c, i, err, ret = EXIT_FAIL;
	long v;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, ":p:F:d:n:vh", long_opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			free(pids);
			pids = NULL;
			if (cli_parse_pids(optarg, &pids, &npids))
				return cli_usage_error(CMD, "'%s' is not a PID or a list of PIDs",
						       optarg);
			break;
		case OPT_CHILDREN:
			t.so.sampling.children = true;
			break;
		case 'F':
			if (parse_long(optarg, 1, 1000, &v))
				goto bad_freq;
			t.so.sampling.freq = v;
			break;
		case 'd':
			if (parse_seconds(optarg, 0.001, 1e7, &t.so.duration))
				goto bad_duration;
			break;
		case OPT_ONCE:
			t.once = true;
			break;
		case 'n':
			if (parse_long(optarg, 1, 1000, &v))
				goto bad_rows;
			t.rows = v;
			break;
		case OPT_RANK:
			if (parse_long(optarg, 0, INT_MAX, &v))
				goto bad_rank;
			t.vo.rank = v;
			break;
		case OPT_NATIVE:
			t.vo.native = true;
			break;
		case OPT_ON_CPU:
			t.vo.waits = false;
			break;
		case OPT_SORT:
			if (strcmp(optarg, "own") && strcmp(optarg, "total"))
				goto bad_sort;
			t.vo.by_total = !strcmp(optarg, "total");
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			free(pids);
			fputs(usage_text, stdout);
			return EXIT_OK;
		default:
			free(pids);
			return cli_bad_option(CMD, c, argv);
		}
	}
	if (optind < argc) {
		free(pids);
		return cli_usage_error(CMD,
				       "unexpected argument '%s' (to watch a command, start it and "
				       "give its pid with -p, or record it: probing record -- CMD)",
				       argv[optind]);
	}
	if (!npids)
		return cli_usage_error(CMD, "say which process to watch: -p PID");
	t.so.pids = pids;
	t.so.npids = npids;
	t.screen = stdout_is_tty() && !t.once;
	t.keys = t.screen && isatty(STDIN_FILENO);

	for (i = 0; i < npids; i++)
		if (preflight_target(pids[i], false))
			goto cleanup_pids;
	if (preflight_privileges() || preflight_pidns(&t.so.sampling.pidns_inum))
		goto cleanup_pids;
	if (make_temp(dir, sizeof(dir), file, sizeof(file)))
		goto cleanup_pids;
	t.so.output = file;
	t.so.on_turn = on_turn;
	t.so.turn_ctx = &t;
	if (session__open(&t.so, &s))
		goto cleanup_temp;
	t.start = now_mono_ns() / 1e9;
	enter_terminal(&t);
	err = session__run(s);
	session__finish(s, &tot);
	restore_terminal();
	ret = err ? EXIT_FAIL : EXIT_OK;
	if (!t.quit && !tot.stop_signal && tot.live == 0)
		log_cmd(CMD, "every process watched has exited");
	/* The last table: asked (--once), or what the screen showed before its process ended. */
	if (!err && (t.once || (t.screen && !t.quit && !tot.stop_signal))) {
		t.screen = false;
		t.tables = 0;
		if (show(&t, s) && ret == EXIT_OK)
			ret = EXIT_FAIL;
	}
	session__close(s);
cleanup_temp:
	remove_temp(dir, file);
cleanup_pids:
	topview__free(&t.tv);
	sb_free(&t.out);
	free(pids);
	return ret;

bad_freq:
	free(pids);
	return cli_usage_error(CMD, "frequency '%s' must be a whole number of Hz from 1 to 1000",
			       optarg);
bad_duration:
	free(pids);
	return cli_usage_error(CMD, "duration '%s' must be a positive number of seconds", optarg);
bad_rows:
	free(pids);
	return cli_usage_error(CMD, "rows '%s' must be a whole number from 1 to 1000", optarg);
bad_rank:
	free(pids);
	return cli_usage_error(CMD, "rank '%s' must be a whole number, 0 or more", optarg);
bad_sort:
	free(pids);
	return cli_usage_error(CMD, "--sort '%s': say own or total", optarg);
}

COMMAND(top, cmd_top, "live view of the hottest functions of processes (py-spy top)", 12);
