// SPDX-License-Identifier: MIT
/*
 * The table of 'probing top' in SQL, over the tables of a recording being written
 * (docs/sql.md): time per stack first (sample_counts after a mark, of a rank, in the states
 * asked), then its functions — numbered by their first frame_defs id as rank_functions does,
 * so that stacks are joined by number, not by text.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/escape.h"
#include "report/topview.h"

/* The time per (stack, state) read, as a CTE named c; %s: the conditions. */
#define TV_COUNTS                                                         \
	"c AS (SELECT stack_id, state, SUM(ns) AS w FROM sample_counts\n" \
	"  WHERE %s GROUP BY stack_id, state)"

/*
 * The functions of those stacks. sfr: every frame; sfv: the frames shown — every frame with
 * native, else a stack's Python frames where it has any (native code is then counted in
 * the Python function that called it, as py-spy does), its native frames where it has none.
 * %s: "1" (native) or "0".
 */
#define TV_FUNCS                                                                                  \
	"defs AS (SELECT id, kind, coalesce(qualname, func) AS func,\n"                           \
	"    coalesce(CASE kind WHEN 'python' THEN file ELSE module END, '') AS file,\n"          \
	"    lineno FROM frame_defs),\n"                                                          \
	"fns AS (SELECT min(id) AS fn, kind, func, file FROM defs GROUP BY kind, func, file),\n"  \
	"fn_of AS (SELECT d.id AS frame_id, f.fn AS fn, d.kind AS kind, d.lineno AS lineno\n"     \
	"  FROM defs d JOIN fns f ON f.kind = d.kind AND f.func = d.func AND f.file = d.file),\n" \
	"sfr AS (SELECT sf.stack_id AS stack_id, sf.depth AS depth, o.fn AS fn,\n"                \
	"    o.kind AS kind, o.lineno AS lineno\n"                                                \
	"  FROM stack_frames sf JOIN fn_of o ON o.frame_id = sf.frame_id\n"                       \
	"  WHERE sf.stack_id IN (SELECT stack_id FROM c)),\n"                                     \
	"sfv AS (SELECT * FROM sfr WHERE %s OR kind = 'python' OR stack_id NOT IN\n"              \
	"  (SELECT stack_id FROM sfr WHERE kind = 'python')),\n"                                  \
	"sfn AS (SELECT DISTINCT stack_id, fn FROM sfv),\n"                                       \
	"incl AS (SELECT s.fn AS fn, SUM(c.w) AS total,\n"                                        \
	"    SUM(iif(c.state = 0, c.w, 0)) AS s0, SUM(iif(c.state = 1, c.w, 0)) AS s1,\n"         \
	"    SUM(iif(c.state = 2, c.w, 0)) AS s2, SUM(iif(c.state = 3, c.w, 0)) AS s3,\n"         \
	"    SUM(iif(c.state = 4, c.w, 0)) AS s4, SUM(iif(c.state = 5, c.w, 0)) AS s5,\n"         \
	"    SUM(iif(c.state = 6, c.w, 0)) AS s6\n"                                               \
	"  FROM c JOIN sfn s ON s.stack_id = c.stack_id GROUP BY s.fn),\n"                        \
	"leaf AS (SELECT stack_id, fn, min(depth) FROM sfv GROUP BY stack_id),\n"                 \
	"own AS (SELECT f.fn AS fn, SUM(c.w) AS w FROM c\n"                                       \
	"  JOIN leaf f ON f.stack_id = c.stack_id GROUP BY f.fn),\n"                              \
	"lw AS (SELECT l.fn AS fn, l.lineno AS lineno, SUM(c.w) AS w FROM c\n"                    \
	"  JOIN (SELECT DISTINCT stack_id, fn, lineno FROM sfv WHERE lineno > 0) l\n"             \
	"    ON l.stack_id = c.stack_id GROUP BY l.fn, l.lineno),\n"                              \
	"hot AS (SELECT fn, lineno, max(w) FROM lw GROUP BY fn)\n"

#define TV_SELECT                                                                 \
	"SELECT f.kind, f.func, nullif(f.file, ''), coalesce(h.lineno, 0),\n"     \
	"  coalesce(o.w, 0), i.total, i.s0, i.s1, i.s2, i.s3, i.s4, i.s5, i.s6\n" \
	"FROM incl i JOIN fns f ON f.fn = i.fn LEFT JOIN own o ON o.fn = i.fn\n"  \
	"LEFT JOIN hot h ON h.fn = i.fn\n"                                        \
	"ORDER BY %s DESC, i.total DESC, f.func LIMIT %d"

static double num(const char *s)
{
	return s ? strtod(s, NULL) : 0;
}

static int add_row(void *ctx, int n, const char *const *v)
{
	struct topview *tv = ctx;
	struct topview_row *r, *rows;
	int i;

	if (n < 13)
		return -EINVAL;
	rows = realloc(tv->rows, (tv->nrows + 1) * sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	tv->rows = rows;
	r = &rows[tv->nrows];
	memset(r, 0, sizeof(*r));
	r->kind = !v[0]			    ? "native"
		  : !strcmp(v[0], "python") ? "python"
		  : !strcmp(v[0], "kernel") ? "kernel"
					    : "native";
	r->func = strdup(v[1] ? v[1] : "?");
	r->file = v[2] ? strdup(v[2]) : NULL;
	if (!r->func || (v[2] && !r->file)) {
		free(r->func);
		free(r->file);
		return -ENOMEM;
	}
	r->line = (int)num(v[3]);
	r->own_ns = num(v[4]);
	r->total_ns = num(v[5]);
	for (i = 0; i < WAIT_NR; i++)
		r->state_ns[i] = num(v[6 + i]);
	tv->nrows++;
	return 0;
}

static int add_state(void *ctx, int n, const char *const *v)
{
	struct topview *tv = ctx;
	int st;

	if (n < 2 || !v[0])
		return 0;
	st = atoi(v[0]);
	if (st >= 0 && st < WAIT_NR)
		tv->state_ns[st] += num(v[1]);
	return 0;
}

static int add_counts(void *ctx, int n, const char *const *v)
{
	struct topview *tv = ctx;

	if (n >= 2) {
		tv->threads = (int)num(v[0]);
		tv->processes = (int)num(v[1]);
	}
	return 0;
}

static int add_rank(void *ctx, int n, const char *const *v)
{
	struct topview *tv = ctx;

	if (n >= 1 && v[0] && tv->nranks < (int)ARRAY_SIZE(tv->ranks))
		tv->ranks[tv->nranks++] = atoi(v[0]);
	return 0;
}

static int get_int64(void *ctx, int n, const char *const *v)
{
	if (n >= 1 && v[0])
		*(int64_t *)ctx = strtoll(v[0], NULL, 10);
	return 0;
}

int64_t topview__mark(struct store *st)
{
	int64_t id = 0;

	if (store__select(st, "SELECT max(rowid) FROM sample_counts", get_int64, &id))
		return 0;
	return id;
}

int topview__read(struct store *st, const struct topview_opts *o, struct topview *tv)
{
	char where[256], all[256], sql[8192];
	int err, i, limit = o->limit < 1 ? 1 : o->limit > 1000 ? 1000 : o->limit;

	topview__free(tv);
	/* Integers only go into the SQL: nothing of the target's. */
	snprintf(all, sizeof(all), "rowid > %" PRId64 "%s", o->since,
		 o->rank >= 0 ? " AND pid IN (SELECT pid FROM processes WHERE rank = " : "");
	if (o->rank >= 0)
		snprintf(all + strlen(all), sizeof(all) - strlen(all), "%d)", o->rank);
	snprintf(where, sizeof(where), "%s%s", all, o->waits ? "" : " AND state = 0");

	snprintf(sql, sizeof(sql),
		 "SELECT state, SUM(ns) FROM sample_counts WHERE %s GROUP BY state", all);
	err = store__select(st, sql, add_state, tv);
	if (err)
		goto fail;
	for (i = 0; i < WAIT_NR; i++)
		if (o->waits || i == WAIT_RUNNING)
			tv->total_ns += tv->state_ns[i];
	snprintf(sql, sizeof(sql),
		 "SELECT count(DISTINCT pid * 4294967296 + tid), count(DISTINCT pid)"
		 " FROM sample_counts WHERE %s",
		 where);
	err = store__select(st, sql, add_counts, tv);
	if (err)
		goto fail;
	err = store__select(st,
			    "SELECT DISTINCT rank FROM processes WHERE rank IS NOT NULL "
			    "ORDER BY rank",
			    add_rank, tv);
	if (err)
		goto fail;
	snprintf(sql, sizeof(sql), "WITH " TV_COUNTS ",\n" TV_FUNCS TV_SELECT, where,
		 o->native ? "1" : "0", o->by_total ? "i.total" : "coalesce(o.w, 0)", limit);
	err = store__select(st, sql, add_row, tv);
	if (err)
		goto fail;
	return 0;
fail:
	topview__free(tv);
	return err;
}

void topview__free(struct topview *tv)
{
	int i;

	for (i = 0; i < tv->nrows; i++) {
		free(tv->rows[i].func);
		free(tv->rows[i].file);
	}
	free(tv->rows);
	memset(tv, 0, sizeof(*tv));
}

/* The last part of a path. */
static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s && s[1] ? s + 1 : path;
}

/* "12.3s", "1m02s", "3h04m": a time in 6 columns at most. */
static void fmt_time(char *buf, size_t size, double ns)
{
	double s = ns / 1e9;

	if (s < 100)
		snprintf(buf, size, "%.2fs", s);
	else if (s < 3600)
		snprintf(buf, size, "%dm%02ds", (int)(s / 60), (int)s % 60);
	else
		snprintf(buf, size, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

/* "lock 98%": the share of @r's time off the CPU, named by its largest state; "" if none. */
static void fmt_wait(char *buf, size_t size, const struct topview_row *r)
{
	double off = 0, most = 0;
	int i, st = -1;

	for (i = 1; i < WAIT_NR; i++) {
		off += r->state_ns[i];
		if (r->state_ns[i] > most) {
			most = r->state_ns[i];
			st = i;
		}
	}
	if (st < 0 || r->total_ns <= 0 || off / r->total_ns < 0.005)
		snprintf(buf, size, "-");
	else
		snprintf(buf, size, "%s %.0f%%", wait_state_name(st), 100 * off / r->total_ns);
}

/* Append @s cut to @cols terminal columns (escaped already: printable text only). */
static int append_cut(struct strbuf *sb, const char *s, int cols)
{
	size_t n = strlen(s), i = 0, w = 0;
	int len;

	while (i < n) {
		len = 1;
		while (i + len < n && ((unsigned char)s[i + len] & 0xc0) == 0x80)
			len++;
		w += utf8_width(s + i, len);
		if ((int)w > cols)
			break;
		i += len;
	}
	return sb_append(sb, s, i);
}

int topview__render(const struct topview *tv, const struct topview_opts *o, int width, int height,
		    struct strbuf *sb)
{
	struct strbuf name = {0}, esc = {0};
	char own[16], total[16], wait[32];
	int i, lines = 0, err = 0, n = 0;
	double pct;

	if (width < 60)
		width = 60;
	/* Where the time went, by state. */
	err = sb_printf(sb, "%.1f s of %d thread%s in %d process%s:", tv->total_ns / 1e9,
			tv->threads, tv->threads == 1 ? "" : "s", tv->processes,
			tv->processes == 1 ? "" : "es");
	for (i = 0; !err && i < WAIT_NR; i++) {
		if (!o->waits && i != WAIT_RUNNING)
			continue;
		pct = tv->total_ns > 0 ? 100 * tv->state_ns[i] / tv->total_ns : 0;
		if (tv->state_ns[i] > 0 && (pct >= 0.05 || i == WAIT_RUNNING))
			err = sb_printf(sb, "  %s %.1f%%", wait_state_name(i), pct);
	}
	if (!err && !o->waits)
		err = sb_puts(sb, "  (on-CPU only)");
	if (!err)
		err = sb_puts(sb, "\n");
	lines++;
	if (!err)
		err = sb_printf(sb, "%7s %7s %8s %9s  %-10s %s\n", o->by_total ? "%Own" : "%Own*",
				o->by_total ? "%Total*" : "%Total", "OwnTime", "TotalTime", "Wait",
				"Function (file:line)");
	lines++;
	for (i = 0; !err && i < tv->nrows && (!height || lines < height); i++, lines++) {
		const struct topview_row *r = &tv->rows[i];
		double d = tv->total_ns > 0 ? tv->total_ns : 1;

		fmt_time(own, sizeof(own), r->own_ns);
		fmt_time(total, sizeof(total), r->total_ns);
		fmt_wait(wait, sizeof(wait), r);
		sb_reset(&name);
		err = sb_puts(&name, r->func);
		if (!err && !strcmp(r->kind, "python") && r->file)
			err = r->line > 0
				      ? sb_printf(&name, " (%s:%d)", base_name(r->file), r->line)
				      : sb_printf(&name, " (%s)", base_name(r->file));
		else if (!err && !strcmp(r->kind, "kernel"))
			err = sb_puts(&name, " [kernel]");
		if (err)
			break;
		sb_reset(&esc);
		err = text_escape(&esc, sb_str(&name), name.len, 0);
		if (!err)
			err = sb_printf(sb, "%6.2f%% %6.2f%% %8s %9s  %-10s ", 100 * r->own_ns / d,
					100 * r->total_ns / d, own, total, wait);
		if (!err)
			err = append_cut(sb, sb_str(&esc), width - 53);
		if (!err)
			err = sb_puts(sb, "\n");
		n++;
	}
	if (!err && !tv->nrows)
		err = sb_puts(sb, "  (no samples yet)\n");
	sb_free(&name);
	sb_free(&esc);
	return err;
}
