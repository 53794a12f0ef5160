// SPDX-License-Identifier: MIT
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "pyoffsets/pyoffsets.h"
#include "injector/agent.h"
#include "live/agent_client.h"
#include "base/jsonq.h"
#include "live/live.h"
#include "live/livedb.h"
#include "live/livetables.h"
#include "base/log.h"
#include "base/util.h"

static const char system_process_cols[] =
	"pid,ppid,comm,state,command,exe,cwd,uid,gid,threads,rss,vsz,utime,stime,start_time,"
	"nice,priority,processor,agent";
static const char system_threads_cols[] =
	"pid,tid,name,state,utime,stime,start_time,processor,priority,nice,wchan,"
	"voluntary_ctxt_switches,nonvoluntary_ctxt_switches";

static livedb_backtrace_fn outside_backtrace;

void livedb__set_outside_backtrace(livedb_backtrace_fn fn)
{
	outside_backtrace = fn;
}

static struct {
	const char *name;
	livedb_backtrace_fn fn;
} outside_tables[8];

void livedb__set_outside_table(const char *name, livedb_backtrace_fn fn)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(outside_tables); i++)
		if (!outside_tables[i].name || !strcmp(outside_tables[i].name, name)) {
			outside_tables[i].name = name;
			outside_tables[i].fn = fn;
			return;
		}
}

static livedb_backtrace_fn outside_table(const char *name)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(outside_tables) && outside_tables[i].name; i++)
		if (!strcmp(outside_tables[i].name, name))
			return outside_tables[i].fn;
	return NULL;
}

/* Rows of a python.* table read from outside by @fn, as the SQL function's result. */
static void outside_rows(sqlite3_context *ctx, pid_t pid, const char *name, livedb_backtrace_fn fn)
{
	struct strbuf sb = {0};
	char msg[512];
	int err;

	err = sb_puts(&sb, "{\"rows\": ");
	err = err ?: fn(pid, &sb);
	err = err ?: sb_puts(&sb, "}");
	if (!err) {
		sqlite3_result_text(ctx, sb_str(&sb), sb.len, SQLITE_TRANSIENT);
	} else {
		if (err == -ENOTSUP)
			snprintf(msg, sizeof(msg),
				 "python.%s of process %d: only the agent can read it in this "
				 "process: run 'probing inject -p %d' first",
				 name, pid, pid);
		else
			snprintf(msg, sizeof(msg), "python.%s of process %d: %s", name, pid,
				 err == -ENOENT	 ? "its Python interpreter cannot be read from "
						   "outside (not CPython " PY_VERSIONS "?)"
				 : err == -ESRCH ? "no such process (it exited?)"
						 : strerror(-err));
		sqlite3_result_error(ctx, msg, -1);
	}
	sb_free(&sb);
}

struct livedb {
	struct live_target t;
	struct agent_client *c; /* NULL: no agent */
	int gil_ms;
	int python;   /* live__is_python() of t.pid once asked; -1 until then */
	char *served; /* ",backtrace,threads,..." the python tables the agent serves */
};

static void livedb_free(void *p)
{
	struct livedb *l = p;

	if (!l)
		return;
	agent_client__free(l->c);
	free(l->served);
	free(l);
}

/* ---- /proc ---------------------------------------------------------------------------- */

static double clk_tck(void)
{
	static long t;

	if (!t)
		t = sysconf(_SC_CLK_TCK);
	return t > 0 ? (double)t : 100.0;
}

static double boot_time(void)
{
	char *s = read_file("/proc/stat", 0, NULL), *p;
	double bt = 0;

	if (s) {
		p = strstr(s, "\nbtime ");
		if (p)
			bt = strtod(p + 7, NULL);
		free(s);
	}
	return bt;
}

/*
 * Split /proc/.../stat into @f: f[0] = pid, f[1] = comm (without parentheses), f[2] = state,
 * f[n] = field n+1 of proc(5). Return the number of fields, 0 on failure. @buf is modified.
 */
static int stat_fields(char *buf, char **f, int max)
{
	char *open = strchr(buf, '('), *close = strrchr(buf, ')'), *p, *save = NULL;
	int n = 0;

	if (!open || !close || close < open || max < 3)
		return 0;
	*open = '\0';
	*close = '\0';
	f[n++] = buf;
	f[n++] = open + 1;
	for (p = strtok_r(close + 2, " \n", &save); p && n < max; p = strtok_r(NULL, " \n", &save))
		f[n++] = p;
	return n;
}

static char *status_value(const char *status, const char *key)
{
	char pat[64];
	const char *p;
	size_t n;

	snprintf(pat, sizeof(pat), "\n%s:", key);
	p = strstr(status, pat);
	if (!p)
		return NULL;
	p += strlen(pat);
	p += strspn(p, " \t");
	n = strcspn(p, "\n");
	return strndup(p, n);
}

static int add_str(struct strbuf *sb, const char *s)
{
	return s ? jq_quote(sb, s) : sb_puts(sb, "null");
}

static int process_rows(pid_t pid, bool agent, struct strbuf *sb)
{
	char fn[96], *stat = NULL, *status = NULL, *cmd = NULL, *f[64], link[PATH_MAX];
	char exe[PATH_MAX] = "", cwd[PATH_MAX] = "", *uid = NULL, *gid = NULL;
	size_t clen = 0, i;
	long page = sysconf(_SC_PAGESIZE);
	ssize_t n;
	int nf, err = -ESRCH;

	snprintf(fn, sizeof(fn), "/proc/%d/stat", pid);
	stat = read_file(fn, 0, NULL);
	snprintf(fn, sizeof(fn), "/proc/%d/status", pid);
	status = read_file(fn, 0, NULL);
	snprintf(fn, sizeof(fn), "/proc/%d/cmdline", pid);
	cmd = read_file(fn, 0, &clen);
	if (!stat || !status)
		goto cleanup;
	nf = stat_fields(stat, f, 64);
	if (nf < 39)
		goto cleanup;
	for (i = 0; cmd && i + 1 < clen; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	snprintf(fn, sizeof(fn), "/proc/%d/exe", pid);
	n = readlink(fn, link, sizeof(link) - 1);
	if (n > 0) {
		link[n] = '\0';
		snprintf(exe, sizeof(exe), "%s", link);
	}
	snprintf(fn, sizeof(fn), "/proc/%d/cwd", pid);
	n = readlink(fn, link, sizeof(link) - 1);
	if (n > 0) {
		link[n] = '\0';
		snprintf(cwd, sizeof(cwd), "%s", link);
	}
	uid = status_value(status, "Uid");
	gid = status_value(status, "Gid");
	err = sb_printf(sb, "{\"rows\": [[%s, %s, ", f[0], f[3]);
	err = err ?: add_str(sb, f[1]);
	err = err ?: sb_printf(sb, ", \"%s\", ", f[2]);
	err = err ?: add_str(sb, cmd && clen ? cmd : NULL);
	err = err ?: sb_puts(sb, ", ");
	err = err ?: add_str(sb, exe[0] ? exe : NULL);
	err = err ?: sb_puts(sb, ", ");
	err = err ?: add_str(sb, cwd[0] ? cwd : NULL);
	err = err
		      ?: sb_printf(sb,
				   ", %ld, %ld, %s, %lld, %s, %.2f, %.2f, %.3f, %s, %s, %s, %s]]}",
				   uid ? strtol(uid, NULL, 10) : -1L,
				   gid ? strtol(gid, NULL, 10) : -1L, f[19],
				   strtoll(f[23], NULL, 10) * page, f[22],
				   strtoull(f[13], NULL, 10) / clk_tck(),
				   strtoull(f[14], NULL, 10) / clk_tck(),
				   boot_time() + strtoull(f[21], NULL, 10) / clk_tck(), f[18],
				   f[17], f[38], agent ? "1" : "0");
cleanup:
	free(stat);
	free(status);
	free(cmd);
	free(uid);
	free(gid);
	return err;
}

static int thread_row(pid_t pid, pid_t tid, double btime, struct strbuf *sb, bool first)
{
	char fn[128], *stat = NULL, *status = NULL, *wchan = NULL, *f[64], *v = NULL, *nv = NULL;
	int nf, err = 0;

	snprintf(fn, sizeof(fn), "/proc/%d/task/%d/stat", pid, tid);
	stat = read_file(fn, 0, NULL);
	snprintf(fn, sizeof(fn), "/proc/%d/task/%d/status", pid, tid);
	status = read_file(fn, 0, NULL);
	snprintf(fn, sizeof(fn), "/proc/%d/task/%d/wchan", pid, tid);
	wchan = read_file(fn, 256, NULL);
	if (!stat || !status)
		goto cleanup; /* the thread exited meanwhile: no row */
	nf = stat_fields(stat, f, 64);
	if (nf < 39)
		goto cleanup;
	v = status_value(status, "voluntary_ctxt_switches");
	nv = status_value(status, "nonvoluntary_ctxt_switches");
	err = sb_printf(sb, "%s[%d, %s, ", first ? "" : ", ", pid, f[0]);
	err = err ?: add_str(sb, f[1]);
	err = err
		      ?: sb_printf(sb, ", \"%s\", %.2f, %.2f, %.3f, %s, %s, %s, ", f[2],
				   strtoull(f[13], NULL, 10) / clk_tck(),
				   strtoull(f[14], NULL, 10) / clk_tck(),
				   btime + strtoull(f[21], NULL, 10) / clk_tck(), f[38], f[17],
				   f[18]);
	err = err ?: add_str(sb, wchan && wchan[0] && strcmp(wchan, "0") ? wchan : NULL);
	err = err ?: sb_printf(sb, ", %s, %s]", v ? v : "null", nv ? nv : "null");
	if (!err)
		err = 1; /* a row was written */
cleanup:
	free(stat);
	free(status);
	free(wchan);
	free(v);
	free(nv);
	return err;
}

static int threads_rows(pid_t pid, struct strbuf *sb)
{
	char fn[64];
	struct dirent *de;
	double btime = boot_time();
	bool first = true;
	int err = 0, r;
	DIR *d;

	snprintf(fn, sizeof(fn), "/proc/%d/task", pid);
	d = opendir(fn);
	if (!d)
		return -ESRCH;
	err = sb_puts(sb, "{\"rows\": [");
	while (!err && (de = readdir(d))) {
		pid_t tid = atoi(de->d_name);

		if (tid <= 0)
			continue;
		r = thread_row(pid, tid, btime, sb, first);
		if (r < 0)
			err = r;
		else if (r > 0)
			first = false;
	}
	closedir(d);
	return err ?: sb_puts(sb, "]}");
}

/* ---- the SQL function behind every view ------------------------------------------------ */

static bool agent_serves(const struct livedb *l, const char *name)
{
	char pat[160];

	if (!l->served)
		return false;
	snprintf(pat, sizeof(pat), ",%s,", name);
	return strstr(l->served, pat) != NULL;
}

/* Does the target run CPython? Asked once; an error (e.g. no permission) counts as yes, so
 * that the table's own read reports it. */
static bool python_process(struct livedb *l)
{
	if (l->python < 0)
		l->python = live__is_python(l->t.pid) != 0;
	return l->python;
}

/*
 * The command that makes the agent serve @lt in process @pid, into @buf: a helper's origin
 * names it ("... for 'probing inject -p PID --torch'"), else 'probing inject -p PID'.
 */
static void install_command(const struct live_table *lt, pid_t pid, char *buf, size_t size)
{
	static const char head[] = "'probing inject -p PID";
	const char *s = lt ? strstr(lt->origin, head) : NULL, *end;

	end = s ? strchr(s + 1, '\'') : NULL;
	if (!end) {
		snprintf(buf, size, "probing inject -p %d", (int)pid);
		return;
	}
	s += sizeof(head) - 1;
	snprintf(buf, size, "probing inject -p %d%.*s", (int)pid, (int)(end - s), s);
}

static void rows_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	struct livedb *l = sqlite3_user_data(ctx);
	const char *schema = (const char *)sqlite3_value_text(argv[0]);
	const char *name = (const char *)sqlite3_value_text(argv[1]);
	struct strbuf sb = {0}, body = {0};
	struct agent_reply r = {0};
	const struct live_table *lt;
	char msg[768], cmd[160], *e;
	int err;

	if (!schema || !name) {
		sqlite3_result_error(ctx, "livedb_rows(schema, name)", -1);
		return;
	}
	if (!strcmp(schema, "system")) {
		if (!l->t.pid) {
			sqlite3_result_error(ctx, "system.* tables are not available over TCP", -1);
			return;
		}
		if (!strcmp(name, "process"))
			err = process_rows(l->t.pid, l->c != NULL, &sb);
		else
			err = threads_rows(l->t.pid, &sb);
		if (err) {
			snprintf(msg, sizeof(msg), "process %d: %s", l->t.pid,
				 err == -ESRCH ? "no such process (it exited?)" : strerror(-err));
			sqlite3_result_error(ctx, msg, -1);
		} else {
			sqlite3_result_text(ctx, sb_str(&sb), sb.len, SQLITE_TRANSIENT);
		}
		sb_free(&sb);
		return;
	}
	if (l->c && agent_serves(l, name)) {
		err = sb_puts(&body, "{\"table\": ");
		err = err ?: sb_printf(&body, "\"python.%s\"}", name);
		err = err
			      ?: agent_client__request(l->c, "rows", sb_str(&body), l->gil_ms, -1,
						       NULL, &r);
		sb_free(&body);
		if (err == -ETIMEDOUT && agent_client__hung(l->c))
			snprintf(msg, sizeof(msg),
				 "python.%s: the agent did not get the GIL within %.1f s: the "
				 "target "
				 "looks hung; try 'probing backtrace -p %d'",
				 name, l->gil_ms / 1000.0, l->t.pid);
		else if (err)
			snprintf(msg, sizeof(msg), "python.%s: the agent did not answer: %s", name,
				 strerror(-err));
		else if (r.type != FRAME_RESULT) {
			e = r.type == FRAME_PYERROR ? jq_text(r.data, "$.error") : NULL;
			snprintf(msg, sizeof(msg), "python.%s: %s", name, e ? e : r.data);
			free(e);
			err = -EIO;
		}
		if (err)
			sqlite3_result_error(ctx, msg, -1);
		else
			sqlite3_result_text(ctx, r.data, r.len, SQLITE_TRANSIENT);
		agent_reply__free(&r);
		return;
	}
	/* Without the agent, a process that runs no Python has no python.* table at all. */
	if (!l->c && l->t.pid && !python_process(l)) {
		char desc[128];

		snprintf(msg, sizeof(msg),
			 "python.%s: %s is not a Python process (no CPython " PY_VERSIONS
			 " interpreter "
			 "in it); its system.process and system.threads can be queried, and "
			 "'probing backtrace -p %d' shows its native stacks",
			 name, live__describe(&l->t, desc, sizeof(desc)), l->t.pid);
		sqlite3_result_error(ctx, msg, -1);
		return;
	}
	/* Here the agent does not serve the table (not loaded, or an older one). */
	if (l->t.pid && outside_table(name)) {
		outside_rows(ctx, l->t.pid, name, outside_table(name));
		return;
	}
	if (!strcmp(name, "backtrace") && !l->c && outside_backtrace && l->t.pid) {
		err = sb_puts(&sb, "{\"rows\": ");
		err = err ?: outside_backtrace(l->t.pid, &sb);
		err = err ?: sb_puts(&sb, "}");
		if (err) {
			snprintf(msg, sizeof(msg), "python.backtrace of process %d: %s", l->t.pid,
				 err == -ENOENT
					 ? "its Python interpreter cannot be read from outside "
					   "(not CPython " PY_VERSIONS "?)"
				 : err == -ESRCH ? "no such process (it exited?)"
						 : strerror(-err));
			sqlite3_result_error(ctx, msg, -1);
		} else {
			sqlite3_result_text(ctx, sb_str(&sb), sb.len, SQLITE_TRANSIENT);
		}
		sb_free(&sb);
		return;
	}
	lt = live_table__find("python", name);
	install_command(lt, l->t.pid, cmd, sizeof(cmd));
	if (!l->c)
		snprintf(msg, sizeof(msg),
			 "python.%s is served by the agent%s%s, which is not loaded in process %d: "
			 "run '%s' first",
			 name, lt && strcmp(lt->origin, "the agent") ? "'s " : "",
			 lt && strcmp(lt->origin, "the agent") ? lt->origin + strlen("its ") : "",
			 l->t.pid, cmd);
	else
		snprintf(msg, sizeof(msg),
			 "python.%s is not served by the agent running in %s%d (it comes from %s, "
			 "not installed there)%s%s%s",
			 name, l->t.pid ? "process " : "", l->t.pid, lt ? lt->origin : "the agent",
			 l->t.pid && lt && strcmp(lt->origin, "the agent") ? ": run '" : "",
			 l->t.pid && lt && strcmp(lt->origin, "the agent") ? cmd : "",
			 l->t.pid && lt && strcmp(lt->origin, "the agent") ? "'" : "");
	sqlite3_result_error(ctx, msg, -1);
}

/*
 * The authorizer of a live database, installed once its own schemas are attached. The
 * database is in memory, but ATTACH would open (and create) any file with the user's SQL,
 * and VACUUM INTO creates its output file (it attaches it internally, which is authorized as
 * an ATTACH); probing often runs as root. Both are refused, as on recordings
 * (report/recording.c); TEMP tables and views stay allowed. 'query -p PID --save FILE' writes
 * its file through a connection of its own.
 */
static int authorize(void *ctx, int action, const char *a, const char *b, const char *db,
		     const char *trigger)
{
	if (action == SQLITE_ATTACH)
		return SQLITE_DENY;
	/* As on recordings: no pragma that moves every temporary file of the process, and no
	 * fts3_tokenizer() (the addresses of C functions). */
	if (action == SQLITE_PRAGMA && a &&
	    (!strcasecmp(a, "temp_store_directory") || !strcasecmp(a, "data_store_directory")))
		return SQLITE_DENY;
	if (action == SQLITE_FUNCTION && b && !strcasecmp(b, "fts3_tokenizer"))
		return SQLITE_DENY;
	return SQLITE_OK;
}

/* ---- building the schema -------------------------------------------------------------- */

static int quote_ident(struct strbuf *sb, const char *s)
{
	int err = sb_puts(sb, "\"");

	for (; !err && *s; s++)
		err = *s == '"' ? sb_puts(sb, "\"\"") : sb_append(sb, s, 1);
	return err ?: sb_puts(sb, "\"");
}

static int sql_string(struct strbuf *sb, const char *s)
{
	int err = sb_puts(sb, "'");

	for (; !err && *s; s++)
		err = *s == '\'' ? sb_puts(sb, "''") : sb_append(sb, s, 1);
	return err ?: sb_puts(sb, "'");
}

/* CREATE VIEW schema.name(c1, c2...) AS SELECT value->>0 ... FROM json_each(...) */
static int create_view(sqlite3 *db, const char *schema, const char *name, const char *cols)
{
	struct strbuf sb = {0};
	char *copy = strdup(cols), *c, *save = NULL;
	int i = 0, err = copy ? 0 : -ENOMEM;

	err = err ?: sb_printf(&sb, "CREATE VIEW %s.", schema);
	err = err ?: quote_ident(&sb, name);
	err = err ?: sb_puts(&sb, "(");
	for (c = strtok_r(copy, ",", &save); !err && c; c = strtok_r(NULL, ",", &save), i++) {
		err = sb_puts(&sb, i ? ", " : "");
		err = err ?: quote_ident(&sb, c);
	}
	err = err ?: sb_puts(&sb, ") AS SELECT ");
	for (int k = 0; !err && k < i; k++)
		err = sb_printf(&sb, "%svalue->>%d", k ? ", " : "", k);
	err = err ?: sb_printf(&sb, " FROM json_each(livedb_rows('%s', ", schema);
	err = err ?: sql_string(&sb, name);
	err = err ?: sb_puts(&sb, "), '$.rows')");
	if (!err && sqlite3_exec(db, sb_str(&sb), NULL, NULL, NULL) != SQLITE_OK) {
		pr_warn("livedb: %s: %s", sb_str(&sb), sqlite3_errmsg(db));
		err = -EINVAL;
	}
	free(copy);
	sb_free(&sb);
	return err;
}

/* The view of a declared table (livetables.h). */
static int create_declared_view(sqlite3 *db, const struct live_table *t)
{
	struct strbuf cols = {0};
	size_t i;
	int err = 0;

	for (i = 0; !err && i < t->ncolumns; i++)
		err = sb_printf(&cols, "%s%s", i ? "," : "", t->columns[i].name);
	err = err ?: create_view(db, t->schema, t->name, sb_str(&cols));
	sb_free(&cols);
	return err;
}

struct table_ctx {
	sqlite3 *db;
	struct livedb *l;
	struct strbuf served;
	int err;
};

static int safe_name(const char *s)
{
	if (!s || !*s)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_'))
			return 0;
	return 1;
}

static int add_col(char **v, int n, void *arg)
{
	struct strbuf *sb = arg;

	if (!v[0] || strchr(v[0], ','))
		return 0;
	return sb_printf(sb, "%s%s", sb->len ? "," : "", v[0]);
}

static int add_agent_table(char **vals, int n, void *arg)
{
	struct table_ctx *tc = arg;
	const char *schema = vals[0], *name = vals[1], *cols_json = vals[2];
	const char *paths[] = {"$[0]"};
	struct strbuf cols = {0};
	int err;

	/* Names become SQL identifiers and strings: accept plain ones only. */
	if (!schema || strcmp(schema, "python") || !safe_name(name) || !cols_json)
		return 0;

	err = jq_each(cols_json, "$", paths, 1, add_col, &cols);
	if (!err && cols.len)
		err = create_view(tc->db, "python", name, sb_str(&cols));
	if (!err)
		err = sb_printf(&tc->served, "%s,", name);
	sb_free(&cols);
	return err == -EINVAL ? 0 : err;
}

int livedb__open_target(const struct live_target *t, int gil_ms, sqlite3 **out)
{
	static const char *const tpaths[] = {"$.schema", "$.name", "$.columns"};
	struct table_ctx tc = {0};
	struct agent_reply r = {0};
	const struct live_table *decl;
	struct livedb *l = NULL;
	sqlite3 *db = NULL;
	size_t i, ndecl;
	int err = 0;

	if (t->pid && kill(t->pid, 0) && errno == ESRCH) {
		log_cmd("query", "no such process: %d", t->pid);
		return -ESRCH;
	}
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->t = *t;
	l->python = -1;
	l->gil_ms = gil_ms;
	/* Nothing reaches files: after its own two ATTACHes, no ATTACH, no VACUUM INTO, no
	 * extensions. */
	if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, NULL) !=
		    SQLITE_OK ||
	    sqlite3_exec(db, "ATTACH ':memory:' AS system; ATTACH ':memory:' AS python;", NULL,
			 NULL, NULL) != SQLITE_OK ||
	    sqlite3_set_authorizer(db, authorize, NULL) != SQLITE_OK ||
	    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL) != SQLITE_OK ||
	    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, 0, NULL) != SQLITE_OK) {
		log_cmd("query", "cannot create the live database: %s", sqlite3_errmsg(db));
		livedb_free(l);
		err = -ENOMEM;
		goto fail;
	}
	if (sqlite3_create_function_v2(db, "livedb_rows", 2, SQLITE_UTF8, l, rows_fn, NULL, NULL,
				       livedb_free) != SQLITE_OK) {
		livedb_free(l); /* not owned by the connection when registration fails */
		err = -ENOMEM;
		goto fail;
	}
	/* The agent, if it runs (never injected here: a query must not change the target). */
	if (t->pid)
		err = agent_client__connect_pid(t->pid, 1000, &l->c);
	else
		err = agent_client__connect_tcp(t->hostport, t->token, 5000, &l->c);
	if (err && !t->pid) {
		live__tcp_error("query", t, err);
		goto fail;
	}
	err = 0;
	if (l->c) {
		err = agent_client__request(l->c, "tables", "{}", gil_ms, -1, NULL, &r);
		if (err || r.type != FRAME_RESULT) {
			pr_warn("query: the agent in %s%d did not list its tables (%s); the "
				"python.* "
				"tables will fail",
				t->pid ? "process " : "", t->pid,
				err == -ETIMEDOUT ? "it did not get the GIL: the target looks hung"
				: err		  ? strerror(-err)
						  : r.data);
			/* Keep the connection: rows_fn reports the same trouble per table. */
			l->served = strdup("");
		} else {
			tc.db = db;
			tc.l = l;
			err = sb_puts(&tc.served, ",");
			err = err ?: jq_each(r.data, "$.tables", tpaths, 3, add_agent_table, &tc);
			l->served = tc.served.buf ? tc.served.buf : strdup("");
			tc.served.buf = NULL;
		}
		agent_reply__free(&r);
		if (err)
			goto fail;
	}
	/* The declared python.* tables the agent does not serve (or no agent): they exist with
	 * their columns, and rows_fn says why they have no rows. */
	decl = live_tables(&ndecl);
	for (i = 0; i < ndecl; i++) {
		if (strcmp(decl[i].schema, "python") || agent_serves(l, decl[i].name))
			continue;
		err = create_declared_view(db, &decl[i]);
		if (err)
			goto fail;
	}
	err = create_view(db, "system", "process", system_process_cols);
	err = err ?: create_view(db, "system", "threads", system_threads_cols);
	if (err)
		goto fail;
	*out = db;
	return 0;
fail:
	sb_free(&tc.served);
	sqlite3_close(db); /* frees l through the function's destructor */
	return err ? err : -EIO;
}
