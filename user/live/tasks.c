// SPDX-License-Identifier: MIT
/* tasks: python.tasks rows and 'backtrace --tasks' (tasks.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/escape.h"
#include "base/jsonq.h"
#include "base/log.h"
#include "base/util.h"
#include "injector/agent.h"
#include "live/agent_client.h"
#include "live/tasks.h"
#include "python/pyproc.h"
#include "python/pytasks.h"

#define AGENT_GIL_MS 1000 /* a hung process must not hang backtrace */
#define AGENT_RUN_MS 10000

/* ---- rows from the outside reader --------------------------------------------------------- */

static int add_str(struct strbuf *sb, const char *s)
{
	return s ? jq_quote(sb, s) : sb_puts(sb, "null");
}

static int task_rows(struct strbuf *sb, const struct pytasks *ts, const struct pytask *t,
		     bool *first)
{
	const struct pyloop *l = NULL;
	struct strbuf common = {0};
	int i, err;

	for (i = 0; i < ts->nloops; i++)
		if (ts->loops[i].addr == t->loop)
			l = &ts->loops[i];
	err = add_str(&common, l ? l->thread : NULL);
	err = err
		      ?: (l && l->tid ? sb_printf(&common, ",%d", (int)l->tid)
				      : sb_puts(&common, ",null"));
	err = err
		      ?: sb_printf(&common, ",%llu,%llu,", (unsigned long long)t->loop,
				   (unsigned long long)t->addr);
	err = err ?: add_str(&common, t->name);
	err = err ?: sb_printf(&common, ",\"%s\",", pytask_state_name(t->state));
	err = err ?: add_str(&common, t->waits_on);
	err = err ?: sb_puts(&common, t->nawaits ? ",\"" : ",null");
	for (i = 0; !err && i < t->nawaits; i++)
		err = sb_printf(&common, "%s%llu", i ? "," : "", (unsigned long long)t->awaits[i]);
	err = err ?: (t->nawaits ? sb_puts(&common, "\"") : 0);
	if (!t->nframes) {
		err = err
			      ?: sb_printf(sb, "%s[%s,null,null,null,null]", *first ? "" : ",",
					   sb_str(&common));
		*first = false;
	}
	for (i = 0; !err && i < t->nframes; i++) {
		const struct frame *fr = &t->frames[i];

		err = sb_printf(sb, "%s[%s,%d,", *first ? "" : ",", sb_str(&common), i);
		err = err ?: add_str(sb, fr->func);
		err = err ?: sb_puts(sb, ",");
		err = err ?: add_str(sb, fr->file);
		err = err
			      ?: (fr->line > 0 ? sb_printf(sb, ",%d]", fr->line)
					       : sb_puts(sb, ",null]"));
		*first = false;
	}
	sb_free(&common);
	return err;
}

static int rows_of(const struct pytasks *ts, struct strbuf *rows)
{
	bool first = true;
	int i, err = sb_puts(rows, "[");

	for (i = 0; !err && i < ts->ntasks; i++)
		err = task_rows(rows, ts, &ts->tasks[i], &first);
	return err ?: sb_puts(rows, "]");
}

/* Open @pid and read its tasks: 0, or -errno (-ENOENT: no interpreter probing can read). */
static int read_outside(pid_t pid, struct pyproc **pp, struct pytasks *ts)
{
	int err;

	memset(ts, 0, sizeof(*ts));
	*pp = pyproc__open(pid);
	if (!*pp)
		return errno == ESRCH			   ? -ESRCH
		       : errno == EACCES || errno == EPERM ? -EPERM
							   : -ENOENT;
	err = pytasks__read(*pp, ts);
	if (err) {
		pyproc__free(*pp);
		*pp = NULL;
	}
	return err;
}

int tasks__json_rows(pid_t pid, struct strbuf *rows)
{
	struct pyproc *pp;
	struct pytasks ts;
	int err;

	err = read_outside(pid, &pp, &ts);
	if (err)
		return err;
	err = ts.unreadable ? -ENOTSUP : rows_of(&ts, rows);
	pytasks__release(&ts);
	pyproc__free(pp);
	return err;
}

/* ---- printing rows ----------------------------------------------------------------------- */

struct tframe {
	char *func, *file;
	long long line; /* 0: unknown */
};

struct ttask {
	long long loop, task, tid; /* tid -1: none */
	char *thread, *name, *state, *waits_on, *awaits;
	struct tframe *frames;
	int nframes;
	bool printed;
};

struct tview {
	struct ttask *t;
	int n;
};

static void view_free(struct tview *v)
{
	int i, j;

	for (i = 0; i < v->n; i++) {
		struct ttask *t = &v->t[i];

		for (j = 0; j < t->nframes; j++) {
			free(t->frames[j].func);
			free(t->frames[j].file);
		}
		free(t->frames);
		free(t->thread);
		free(t->name);
		free(t->state);
		free(t->waits_on);
		free(t->awaits);
	}
	free(v->t);
}

/* A copy of a value jq_each gave (owned by SQLite), NULL staying NULL; *@oom set on failure. */
static char *copy(const char *s, bool *oom)
{
	char *c = s ? strdup(s) : NULL;

	if (s && !c)
		*oom = true;
	return c;
}

static int add_row(char **v, int n, void *ctx)
{
	struct tview *view = ctx;
	struct ttask *t = NULL, *tmp;
	struct tframe *f;
	bool oom = false;
	long long id;

	if (n < 12 || !v[2] || !v[3])
		return 0;
	id = strtoll(v[3], NULL, 10);
	/* A task's rows come together: the last task, or a new one. */
	if (view->n && view->t[view->n - 1].task == id)
		t = &view->t[view->n - 1];
	if (!t) {
		tmp = realloc(view->t, (view->n + 1) * sizeof(*tmp));
		if (!tmp)
			return -ENOMEM;
		view->t = tmp;
		t = &view->t[view->n++];
		memset(t, 0, sizeof(*t));
		t->task = id;
		t->loop = strtoll(v[2], NULL, 10);
		t->tid = v[1] ? strtoll(v[1], NULL, 10) : -1;
		t->thread = copy(v[0], &oom);
		t->name = copy(v[4], &oom);
		t->state = copy(v[5], &oom);
		t->waits_on = copy(v[6], &oom);
		t->awaits = copy(v[7], &oom);
	}
	if (!v[8] || oom)
		return oom ? -ENOMEM : 0; /* no coroutine frames */
	f = realloc(t->frames, (t->nframes + 1) * sizeof(*f));
	if (!f)
		return -ENOMEM;
	t->frames = f;
	f = &t->frames[t->nframes++];
	f->func = copy(v[9], &oom);
	f->file = copy(v[10], &oom);
	f->line = v[11] ? strtoll(v[11], NULL, 10) : 0;
	return oom ? -ENOMEM : 0;
}

static struct ttask *find_task(struct tview *v, long long loop, long long id)
{
	int i;

	for (i = 0; i < v->n; i++)
		if (v->t[i].task == id && v->t[i].loop == loop)
			return &v->t[i];
	return NULL;
}

/* Is task @id awaited by another task of the same loop? */
static bool awaited(struct tview *v, const struct ttask *t)
{
	char pat[32];
	int i;

	snprintf(pat, sizeof(pat), "%lld", t->task);
	for (i = 0; i < v->n; i++) {
		const char *a = v->t[i].awaits, *p;
		size_t len = strlen(pat);

		if (v->t[i].loop != t->loop || !a || &v->t[i] == t)
			continue;
		for (p = a; (p = strstr(p, pat)); p += len)
			if ((p == a || p[-1] == ',') && (p[len] == ',' || !p[len]))
				return true;
	}
	return false;
}

static void print_task(struct tview *v, struct ttask *t, int level, FILE *f, struct strbuf *e)
{
	const char *a, *p;
	char *end;
	int indent = 4 + 4 * level, i, k = 0;

	t->printed = true;
	fprintf(f, "%*sTask \"%s\" %s", indent, "", text_str(&e[0], t->name ? t->name : "?", 0),
		t->state ? text_str(&e[1], t->state, 0) : "?");
	if (t->waits_on)
		fprintf(f, " on %s", text_str(&e[0], t->waits_on, 0));
	for (a = t->awaits; a && *a; a = *end ? end + 1 : end) {
		long long id = strtoll(a, &end, 10);
		struct ttask *c = find_task(v, t->loop, id);

		if (end == a)
			break;
		if (c)
			fprintf(f, "%s\"%s\"", k++ ? ", " : ": ",
				text_str(&e[0], c->name ? c->name : "?", 0));
		else
			fprintf(f, "%sa task done meanwhile (0x%llx)", k++ ? ", " : ": ", id);
	}
	fputc('\n', f);
	for (i = 0; i < t->nframes; i++) {
		fprintf(f, "%*s%s (%s:", indent + 4, "", text_str(&e[0], t->frames[i].func, 0),
			text_str(&e[1], t->frames[i].file, 0));
		if (t->frames[i].line > 0)
			fprintf(f, "%lld)\n", t->frames[i].line);
		else
			fputs("?)\n", f);
	}
	/* The tasks it waits for, under it. */
	for (p = t->awaits; p && *p; p = *end ? end + 1 : end) {
		long long id = strtoll(p, &end, 10);
		struct ttask *c = find_task(v, t->loop, id);

		if (end == p)
			break;
		if (c && !c->printed && level < 32)
			print_task(v, c, level + 1, f, e);
	}
}

int tasks__print_rows(const char *json, FILE *f)
{
	static const char *const paths[] = {"$[0]", "$[1]", "$[2]", "$[3]", "$[4]",  "$[5]",
					    "$[6]", "$[7]", "$[8]", "$[9]", "$[10]", "$[11]"};
	struct strbuf e[2] = {{0}};
	struct tview v = {0};
	int i, j, n, err;

	err = jq_each(json, "$.rows", paths, 12, add_row, &v);
	if (err) {
		view_free(&v);
		return err;
	}
	if (!v.n)
		fputs("\nasyncio: no pending tasks\n", f);
	for (i = 0; i < v.n; i++) {
		struct ttask *t = &v.t[i];
		bool seen = false;

		for (j = 0; j < i && !seen; j++)
			seen = v.t[j].loop == t->loop;
		if (seen)
			continue;
		for (j = i, n = 0; j < v.n; j++)
			n += v.t[j].loop == t->loop;
		if (t->tid >= 0)
			fprintf(f, "\nasyncio event loop 0x%llx in thread %lld \"%s\": %d task%s\n",
				t->loop, t->tid, text_str(&e[0], t->thread ? t->thread : "?", 0), n,
				n == 1 ? "" : "s");
		else
			fprintf(f, "\nasyncio event loop 0x%llx (not running): %d task%s\n",
				t->loop, n, n == 1 ? "" : "s");
		/* Tasks nobody waits for first, each followed by what it waits for. */
		for (j = i; j < v.n; j++)
			if (v.t[j].loop == t->loop && !v.t[j].printed && !awaited(&v, &v.t[j]))
				print_task(&v, &v.t[j], 0, f, e);
		for (j = i; j < v.n; j++)
			if (v.t[j].loop == t->loop && !v.t[j].printed)
				print_task(&v, &v.t[j], 0, f, e);
	}
	view_free(&v);
	sb_free(&e[0]);
	sb_free(&e[1]);
	return 0;
}

/* ---- backtrace --tasks ------------------------------------------------------------------- */

/* python.tasks from the agent, if one runs in @pid. 0 and *@json, or -errno. */
static int agent_rows(pid_t pid, char **json)
{
	struct agent_client *c = NULL;
	struct agent_reply r = {0};
	int err;

	*json = NULL;
	err = agent_client__connect_pid(pid, 1000, &c);
	if (err)
		return err;
	err = agent_client__request(c, "rows", "{\"table\": \"python.tasks\"}", AGENT_GIL_MS,
				    AGENT_RUN_MS, NULL, &r);
	if (!err && r.type != FRAME_RESULT)
		err = -EIO;
	if (!err) {
		*json = r.data;
		r.data = NULL;
	}
	agent_reply__free(&r);
	agent_client__free(c);
	return err;
}

int tasks__print(pid_t pid, FILE *f)
{
	struct strbuf rows = {0};
	struct pyproc *pp = NULL;
	struct pytasks ts;
	char *json = NULL;
	int err, aerr = -ENOENT;

	err = read_outside(pid, &pp, &ts);
	if (err == -ENOTSUP || (!err && ts.unreadable))
		aerr = agent_rows(pid, &json);
	if (json) {
		pr_warn("asyncio tasks read by the agent in process %d (%s%s)", pid,
			err ? "this interpreter's tasks cannot be read from outside: "
			    : "some tasks are of a pure-Python Task class, which only the agent "
			      "can read",
			err ? ts.why : "");
		err = tasks__print_rows(json, f);
		goto cleanup;
	}
	if (err) {
		if (err == -ENOTSUP)
			pr_warn("process %d: its asyncio tasks cannot be read from outside (%s); "
				"load the agent ('probing inject -p %d') and run again",
				pid, ts.why[0] ? ts.why : "this interpreter", pid);
		else if (err != -ESRCH)
			pr_warn("process %d: cannot read its asyncio tasks: %s", pid,
				strerror(-err));
		goto cleanup;
	}
	if (ts.unreadable)
		pr_warn("process %d: %d asyncio task%s of a pure-Python Task class (no _asyncio "
			"accelerator?) cannot be read from outside%s; with the agent running "
			"('probing inject -p %d') they are read from inside",
			pid, ts.unreadable, ts.unreadable == 1 ? "" : "s",
			aerr ? "" : " and the agent did not answer", pid);
	if (!ts.asyncio) {
		fputs("\nasyncio: not imported in this process\n", f);
	} else if (!ts.ntasks && ts.unreadable) {
		fprintf(f, "\nasyncio: %d pending task%s that only the agent can read\n",
			ts.unreadable, ts.unreadable == 1 ? "" : "s");
	} else {
		err = sb_puts(&rows, "{\"rows\": ");
		err = err ?: rows_of(&ts, &rows);
		err = err ?: sb_puts(&rows, "}");
		err = err ?: tasks__print_rows(sb_str(&rows), f);
	}
	pytasks__release(&ts);
cleanup:
	pyproc__free(pp);
	free(json);
	sb_free(&rows);
	return err;
}
