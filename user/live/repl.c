// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <histedit.h>
#include <limits.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>
#include <sys/stat.h>

#include "injector/agent.h"
#include "base/cli.h"
#include "base/escape.h"
#include "base/jsonq.h"
#include "base/log.h"
#include "live/repl.h"
#include "base/util.h"

static volatile sig_atomic_t got_int, got_term, got_winch;
static bool more; /* inside a multi-line block: "... " prompt */

static void on_signal(int sig)
{
	if (sig == SIGINT)
		got_int = 1;
	else if (sig == SIGWINCH)
		got_winch = 1;
	else
		got_term = 1;
}

static char *prompt(EditLine *el)
{
	return more ? "... " : ">>> ";
}

/*
 * Ctrl-D on an empty line ends the session. libedit puts the terminal back in cooked mode
 * between two lines; a Ctrl-D typed then is taken by the line discipline as end-of-file,
 * which it keeps in its buffer as a NUL byte, and that NUL is what a read returns once
 * libedit has switched to raw mode again. Both forms count, on an empty line only.
 */
static bool is_eof_key(EditLine *el, char byte)
{
	const LineInfo *li;

	if (byte != 4 && byte != 0)
		return false;
	li = el_line(el);
	return li && li->lastchar == li->buffer;
}

/*
 * libedit's own reader retries a read interrupted by a signal, so one Ctrl-C would not end
 * el_gets(); this reader gives up (-1, EINTR) when Ctrl-C or a termination signal came.
 */
static int getc_fn(EditLine *el, wchar_t *wc)
{
	mbstate_t ps = {0};
	char buf[MB_LEN_MAX];
	size_t n = 0, r;
	ssize_t got;

	for (;;) {
		if (got_int || got_term) {
			errno = EINTR;
			return -1;
		}
		if (got_winch) {
			got_winch = 0;
			el_resize(el);
		}
		got = read(STDIN_FILENO, buf + n, 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -1;
		if (got == 0)
			return 0;
		if (n == 0 && is_eof_key(el, buf[0]))
			return 0;
		n++;
		r = mbrtowc(wc, buf, n, &ps);
		if (r == (size_t)-2 && n < sizeof(buf))
			continue; /* more bytes of a multibyte character */
		if (r == (size_t)-1 || r == (size_t)-2) {
			*wc = (unsigned char)buf[0]; /* not valid in this locale: take the byte */
			memset(&ps, 0, sizeof(ps));
		}
		return 1;
	}
}

static void history_path(char *out, size_t len)
{
	const char *home = getenv("HOME");

	snprintf(out, len, "%s/.probing_history", home && *home ? home : ".");
}

/*
 * Open the history file @path (@flags: O_RDONLY, or O_WRONLY | O_CREAT) if it is ours: a
 * regular file we own with no other name, not reached through a symbolic link. As root
 * with another user's $HOME (sudo -E), that user's ~/.probing_history could otherwise be a
 * link or a hard link to any file, which the history would be read from or written over.
 * Return the descriptor, or -1 (quietly: the history is a convenience).
 */
static int open_history(const char *path, int flags)
{
	struct stat st;
	int fd;

	fd = open(path, flags | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1) {
		pr_debug("not using %s for the history: not a regular file of ours", path);
		close(fd);
		return -1;
	}
	return fd;
}

static void load_history(History *hist, const char *path)
{
	char proc[64];
	HistEvent ev;
	int fd = open_history(path, O_RDONLY);

	if (fd < 0)
		return;
	/* The file just checked, whatever its name now leads to. */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	history(hist, &ev, H_LOAD, proc);
	close(fd);
}

static void save_history(History *hist, const char *path)
{
	HistEvent ev;
	FILE *f;
	int fd = open_history(path, O_WRONLY | O_CREAT);

	if (fd < 0)
		return;
	if (ftruncate(fd, 0) || fchmod(fd, 0600) || !(f = fdopen(fd, "w"))) {
		close(fd);
		return;
	}
	history(hist, &ev, H_SAVE_FP, f);
	fclose(f);
}

/* Run @code in repl mode; print its output. -1: the connection is unusable. */
static int run_source(const char *cmd, const struct live_target *t, struct agent_client **c,
		      const char *code, int gil_ms, bool *need_more)
{
	struct strbuf body = {0};
	char *json = NULL, *v;
	int rc;

	*need_more = false;
	if (!*c && live__connect(cmd, t, false, c))
		return -1;
	if (sb_puts(&body, "{\"mode\": \"repl\", \"code\": ") || jq_quote(&body, code) ||
	    sb_puts(&body, "}")) {
		sb_free(&body);
		return 0;
	}
	got_int = 0;
	rc = live__request(cmd, t, *c, "eval", sb_str(&body), gil_ms, -1, &got_int, &json);
	sb_free(&body);
	if (rc) {
		/* A request left waiting for the GIL would run late: drop the connection (the
		 * agent skips requests whose client is gone) and reconnect for the next input. */
		agent_client__free(*c);
		*c = NULL;
		return 0;
	}
	*need_more = jq_bool(json, "$.more");
	live__print_output(json);
	v = jq_text(json, "$.exception");
	if (v)
		fputs(v, stderr);
	free(v);
	fflush(stderr);
	free(json);
	return 0;
}

static int banner(const char *cmd, const struct live_target *t, struct agent_client *c)
{
	struct agent_reply r = {0};
	struct strbuf e = {0};
	char desc[128], *ver = NULL;

	if (!agent_client__request(c, "hello", "", 2000, 2000, NULL, &r) && r.type == FRAME_RESULT)
		ver = jq_text(r.data, "$.python");
	agent_reply__free(&r);
	if (ver)
		ver[strcspn(ver, " ")] = '\0';
	fprintf(stderr,
		"Python %s in %s, through the probing agent.\n"
		"Code runs in __main__ on the agent's thread. Ctrl-C cancels the input or "
		"interrupts running code; Ctrl-D leaves (the process keeps running).\n",
		text_str(&e, ver, 0), live__describe(t, desc, sizeof(desc)));
	free(ver);
	sb_free(&e);
	return 0;
}

int repl__run(const char *cmd, const struct live_target *t, struct agent_client *c, int gil_ms)
{
	struct sigaction sa = {0}, old_int, old_term, old_hup, old_winch;
	struct strbuf src = {0};
	char hist_file[PATH_MAX];
	EditLine *el = NULL;
	History *hist = NULL;
	HistEvent ev;
	bool tty = isatty(STDIN_FILENO), need_more = false;
	const char *line;
	char *plain = NULL;
	size_t plen = 0;
	int count, rc = EXIT_OK;

	setlocale(LC_CTYPE, "");
	banner(cmd, t, c);
	/* No SA_RESTART: a blocked read returns so the flag is seen at once. */
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGHUP, &sa, &old_hup);
	sigaction(SIGWINCH, &sa, &old_winch);
	if (tty) {
		history_path(hist_file, sizeof(hist_file));
		hist = history_init();
		el = el_init("probing", stdin, stdout, stderr);
		if (!hist || !el) {
			pr_warn("%s: cannot set up line editing", cmd);
			rc = EXIT_FAIL;
			goto cleanup;
		}
		history(hist, &ev, H_SETSIZE, 2000);
		history(hist, &ev, H_SETUNIQUE, 1);
		load_history(hist, hist_file);
		el_set(el, EL_EDITOR, "emacs");
		el_set(el, EL_PROMPT, prompt);
		el_set(el, EL_HIST, history, hist);
		el_set(el, EL_GETCFN, getc_fn);
		el_source(el, NULL); /* ~/.editrc, as other libedit programs do */
	}
	for (;;) {
		size_t n;

		got_int = 0;
		if (tty) {
			line = el_gets(el, &count);
		} else {
			ssize_t r = getline(&plain, &plen, stdin);

			line = r < 0 ? NULL : plain;
			count = r < 0 ? (errno == EINTR ? -1 : 0) : r;
		}
		if (got_term)
			break;
		if (!line) {
			if (count < 0 && got_int) {
				/* Ctrl-C: forget the input so far, as Python's prompt does. */
				fputs("\nKeyboardInterrupt\n", stderr);
				sb_reset(&src);
				more = false;
				if (el)
					el_reset(el);
				continue;
			}
			if (tty)
				fputc('\n', stdout); /* Ctrl-D */
			/* End of input inside a block: an empty line completes it. */
			if (more && !got_int && !sb_puts(&src, "\n"))
				run_source(cmd, t, &c, sb_str(&src), gil_ms, &need_more);
			break;
		}
		n = strlen(line);
		if (tty && n > 1) {
			char *entry = strndup(line, line[n - 1] == '\n' ? n - 1 : n);

			if (entry)
				history(hist, &ev, H_ENTER, entry);
			free(entry);
		}
		if (src.len && sb_puts(&src, "\n"))
			break;
		if (sb_append(&src, line, n && line[n - 1] == '\n' ? n - 1 : n))
			break;
		if (run_source(cmd, t, &c, sb_str(&src), gil_ms, &need_more) < 0) {
			rc = EXIT_FAIL;
			break;
		}
		more = need_more;
		if (!more)
			sb_reset(&src);
	}
cleanup:
	if (hist) {
		save_history(hist, hist_file);
		history_end(hist);
	}
	if (el)
		el_end(el);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGHUP, &old_hup, NULL);
	sigaction(SIGWINCH, &old_winch, NULL);
	free(plain);
	sb_free(&src);
	agent_client__free(c);
	return rc;
}
