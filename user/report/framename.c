// SPDX-License-Identifier: MIT
/* Frame names (docs/design.md §4) and parsing them back from folded stacks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/escape.h"
#include "report/framename.h"

/* Append @s escaped for display. */
static int put_text(struct strbuf *sb, const char *s)
{
	return text_escape(sb, s, strlen(s), 0);
}

int frame_name(struct strbuf *sb, const struct frame *f)
{
	const char *name = f->func ? f->func : "[unknown]";
	int err;

	if (f->kind != FRAME_PYTHON)
		return put_text(sb, name);
	if (f->qualname && *f->qualname)
		name = f->qualname;
	err = put_text(sb, name);
	if (err || !f->file)
		return err;
	err = sb_puts(sb, " (");
	err = err ?: put_text(sb, f->file);
	if (!err && f->line > 0)
		err = sb_printf(sb, ":%d", f->line);
	return err ?: sb_puts(sb, ")");
}

/*
 * Make the (escaped: no line breaks) bytes from @start on usable inside a folded line: ';'
 * separates frames there, so it becomes ':' as in perf's and flamegraph.pl's stackcollapse.
 */
static void folded_sanitize(struct strbuf *sb, size_t start)
{
	size_t i;

	for (i = start; i < sb->len; i++)
		if (sb->buf[i] == ';')
			sb->buf[i] = ':';
}

int folded_append(struct strbuf *sb, const char *name, enum frame_kind kind)
{
	size_t start = sb->len;
	int err;

	err = put_text(sb, name);
	if (err)
		return err;
	folded_sanitize(sb, start);
	return kind == FRAME_KERNEL ? sb_puts(sb, "_[k]") : 0;
}

int frame_folded_name(struct strbuf *sb, const struct frame *f)
{
	size_t start = sb->len;
	int err;

	err = frame_name(sb, f);
	if (err)
		return err;
	folded_sanitize(sb, start);
	return f->kind == FRAME_KERNEL ? sb_puts(sb, "_[k]") : 0;
}

static bool strip_prefix(char **s, const char *prefix)
{
	size_t n = strlen(prefix);

	if (strncmp(*s, prefix, n))
		return false;
	*s += n;
	return true;
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n >= k && !memcmp(s + n - k, suffix, k);
}

/*
 * Split "name (file:line)" / "name (file)". With @need_line, only accept a
 * line number after the last ':' of the parenthesis (the unprefixed form is recognised by it).
 */
static bool parse_python(char *s, struct frame *f, bool need_line)
{
	size_t n = strlen(s);
	char *open, *colon, *end, *dot;
	long line = 0;

	if (!ends_with(s, n, ")"))
		return false;
	/* Qualnames hold no spaces but file names may, so the first " (" ends the name. */
	open = strstr(s, " (");
	if (!open || open == s)
		return false;
	s[n - 1] = '\0';
	colon = strrchr(open + 2, ':');
	if (colon && colon[1]) {
		line = strtol(colon + 1, &end, 10);
		if (*end || line <= 0)
			colon = NULL;
	} else {
		colon = NULL;
	}
	if (!colon && need_line) {
		s[n - 1] = ')';
		return false;
	}
	*open = '\0';
	if (colon)
		*colon = '\0';
	f->kind = FRAME_PYTHON;
	f->file = open + 2;
	f->line = colon ? (int)line : 0;
	dot = strrchr(s, '.');
	f->qualname = dot ? s : NULL;
	f->func = dot ? dot + 1 : s;
	return true;
}

int frame_parse_folded(char *s, struct frame *f)
{
	size_t n;
	char *open;

	memset(f, 0, sizeof(*f));
	if (strip_prefix(&s, "py:")) {
		if (!*s)
			return -EINVAL;
		if (!parse_python(s, f, false)) {
			char *dot = strrchr(s, '.');

			f->kind = FRAME_PYTHON;
			f->qualname = dot ? s : NULL;
			f->func = dot ? dot + 1 : s;
		}
		return 0;
	}
	if (strip_prefix(&s, "kernel:")) {
		f->kind = FRAME_KERNEL;
		f->func = s;
		return *s ? 0 : -EINVAL;
	}
	if (strip_prefix(&s, "native:")) {
		f->kind = FRAME_NATIVE;
		f->func = s;
		return *s ? 0 : -EINVAL;
	}
	n = strlen(s);
	if (!n)
		return -EINVAL;
	if (ends_with(s, n, "_[k]") && n > 4) {
		s[n - 4] = '\0';
		f->kind = FRAME_KERNEL;
		f->func = s;
		return 0;
	}
	if (parse_python(s, f, true))
		return 0;
	f->kind = FRAME_NATIVE;
	f->func = s;
	open = strstr(s, " [");
	if (open && open != s && ends_with(s, n, "]")) {
		s[n - 1] = '\0';
		*open = '\0';
		f->module = open + 2;
	}
	return 0;
}
