// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/escape.h"
#include "base/jobinfo.h"
#include "base/log.h"
#include "base/outfile.h"
#include "base/util.h"
#include "bpf/sampler.h"
#include "live/btjob.h"
#include "live/livejob.h"
#include "native/symbolize.h"
#include "record/collectives.h"
#include "record/preflight.h"
#include "record/recorder.h"
#include "record/session.h"
#include "record/store.h"
#include "watch/diagnose.h"
#include "watch/segdir.h"
#include "watch/steps.h"
#include "watch/watch.h"

#define CMD	    "watch"
#define LATEST_FILE "latest-report"
#define GAP_FACTOR  5 /* the default threshold: this many times the longest recent gap */
/*
 * Between two drains of the kernel's records, unless something wakes the reader (ms; record:
 * 10). Each wake-up of a thread of probing costs the machine more than a drain's records
 * (70-300 us each on a guest of 2 vCPUs: 20 a second of the reader and as many of the loop
 * were a third of the watcher's time at 8 ranks x 64 threads). A stall is judged on every
 * record written until then (session__sync, up to WATCH_SYNC_MS), and the loop wakes when
 * one would be due (session__wake_by), not at the next drain.
 */
#define WATCH_PACE_MS 500
#define WATCH_SYNC_MS 1000
/* Renamed Python threads are seen within a minute (record: 10 s); new threads at birth. */
#define WATCH_NAMES_EVERY_S 60

/* A process that ended while watched. */
struct death {
	pid_t pid;
	int rank;
	int status;
	double ts;
	bool counts;   /* a failure of a rank or of a process named with -p: a stall */
	bool reported; /* looked at by report_death */
};

/* A rank's oldest call under way. */
struct call_now {
	pid_t pid;
	char op[32], grp[64];
	int64_t seq;
	double entered;
};

struct watch {
	const struct watch_opts *o;
	struct session_opts so;
	struct segdir *sd;
	struct session *s;
	pid_t root; /* the command started, when there is one */
	double seg_start;
	struct death *deaths;
	size_t ndeaths, capdeaths;
	bool death_pending;
	/* The stall being reported, if any: when declared, and its report. */
	bool stalled;
	double stalled_at;
	char report[PATH_MAX];
	double last_hook;
	pid_t hook_pid;
	int stalls, reports;
	struct call_now *calls;
	size_t ncalls, capcalls;
	/* One symbolizer for every snapshot: the libraries of the job (libtorch...) are read
	 * once, by a first snapshot taken when the job is up (warm), not at the first stall. */
	struct symbolizer *sym;
	bool warm;
	/* That snapshot is read on a thread of its own, while the loop goes on (a death
	 * meanwhile is handled at once, its report without native frames). */
	bool warming;
	pthread_t warm_thread;
	struct job_procs warm_jp;
	double last_check;
	double due; /* when a stall would be due (unix s; 0: none): checked then */
	/* bound_size: when it looks next, the current segment's bytes at its last look and the
	 * fastest growth seen lately (bytes a second, halved at each look that saw slower). */
	double bound_next, bound_at;
	uint64_t bound_cur;
	double bound_rate;
	/* The PyTorch hooks' steps, where they are in (NULL if the thread could not start). */
	struct steps *steps;
};

static volatile sig_atomic_t dump_asked;

static void on_usr1(int sig)
{
	(void)sig;
	dump_asked = 1;
}

static double now_s(void)
{
	return now_real_ns() / 1e9;
}

static const char *clock_str(double t, char *buf, size_t size)
{
	time_t tt = (time_t)t;
	struct tm tm;

	localtime_r(&tt, &tm);
	strftime(buf, size, "%H:%M:%S", &tm);
	return buf;
}

/* ---- what the collectives say --------------------------------------------------------- */

static int gather_call(void *ctx, const struct store_collective *row, bool queued)
{
	struct watch *w = ctx;
	struct call_now *c;
	size_t i;

	(void)queued;
	for (i = 0; i < w->ncalls; i++)
		if (w->calls[i].pid == row->pid) {
			if (row->start_ns / 1e9 >= w->calls[i].entered)
				return 0; /* keep its oldest */
			break;
		}
	if (i == w->ncalls) {
		if (grow_array(&w->calls, &w->capcalls, w->ncalls + 1, sizeof(*w->calls)))
			return -ENOMEM;
		w->ncalls++;
	}
	c = &w->calls[i];
	c->pid = row->pid;
	snprintf(c->op, sizeof(c->op), "%s", row->op ? row->op : "?");
	snprintf(c->grp, sizeof(c->grp), "%s", row->grp ? row->grp : "");
	c->seq = row->seq;
	c->entered = row->start_ns / 1e9;
	return 0;
}

/* The calls under way now, one per process (its oldest), into w->calls. */
static void gather_calls(struct watch *w, struct collectives *cs)
{
	w->ncalls = 0;
	if (cs)
		collectives__under_way(cs, gather_call, w);
}

static const struct call_now *call_of(const struct watch *w, pid_t pid)
{
	size_t i;

	for (i = 0; i < w->ncalls; i++)
		if (w->calls[i].pid == pid)
			return &w->calls[i];
	return NULL;
}

/*
 * The threshold of the hooks' steps: --stall, or GAP_FACTOR times the longest recent step,
 * with the floor; 0 while no step was seen to move (nothing to judge by).
 */
static double step_threshold(const struct watch *w, const struct step_progress *sp)
{
	double t;

	if (w->o->stall_s > 0)
		return w->o->stall_s;
	if (!(sp->max_step_s > 0))
		return 0;
	t = GAP_FACTOR * sp->max_step_s;
	return t > w->o->stall_floor_s ? t : w->o->stall_floor_s;
}

/* The threshold now: --stall, or GAP_FACTOR times the longest recent gap, with the floor. */
static double threshold(const struct watch *w, const struct coll_progress *p)
{
	double t;

	if (w->o->stall_s > 0)
		return w->o->stall_s;
	t = p->gaps ? GAP_FACTOR * p->max_gap_ns / 1e9 : 0;
	return t > w->o->stall_floor_s ? t : w->o->stall_floor_s;
}

/* ---- the report ---------------------------------------------------------------------- */

static const char watch_schema[] =
	"CREATE TABLE watch_stall(time REAL NOT NULL, reason TEXT NOT NULL, kind TEXT NOT NULL,"
	" culprit_pid INTEGER, culprit_rank INTEGER, diagnosis TEXT NOT NULL,"
	" threshold REAL, recovered_at REAL);\n"
	"CREATE TABLE watch_ranks(pid INTEGER NOT NULL, rank INTEGER, label TEXT,"
	" alive INTEGER NOT NULL, exit_status INTEGER, exit_time REAL, op TEXT, grp TEXT,"
	" seq INTEGER, entered REAL, last_done REAL, func TEXT, file TEXT, lineno INTEGER,"
	" state TEXT, wait TEXT, locals TEXT);\n";

struct report_ctx {
	struct watch *w;
	const char *reason;
	double time, thr;
	const struct dg_input *in;
	const struct dg_result *res;
};

static int write_report(sqlite3 *db, const struct bt_job *j, void *arg)
{
	struct report_ctx *rc = arg;
	const char *const *files;
	sqlite3_stmt *st = NULL;
	char state[2] = {0};
	double from = rc->time - rc->w->o->window_s;
	int i, n, err = 0;

	(void)j;
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO watch_stall VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
			       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_double(st, 1, rc->time);
	btjob__bind_text(st, 2, rc->reason);
	btjob__bind_text(st, 3, diagnose_kind_name(rc->res->kind));
	if (rc->res->culprit)
		sqlite3_bind_int(st, 4, rc->res->culprit);
	if (rc->res->culprit && rc->res->culprit_rank >= 0)
		sqlite3_bind_int(st, 5, rc->res->culprit_rank);
	btjob__bind_text(st, 6, rc->res->text);
	sqlite3_bind_double(st, 7, rc->thr);
	err = btjob__step(st);
	sqlite3_finalize(st);
	if (err)
		return err;
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO watch_ranks VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
			       " ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
			       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	for (i = 0; !err && i < rc->in->n; i++) {
		const struct dg_rank *r = &rc->in->r[i];

		sqlite3_bind_int(st, 1, r->pid);
		if (r->rank >= 0)
			sqlite3_bind_int(st, 2, r->rank);
		btjob__bind_text(st, 3, r->label);
		sqlite3_bind_int(st, 4, !r->dead);
		if (r->dead) {
			sqlite3_bind_int(st, 5, r->status);
			sqlite3_bind_double(st, 6, r->exit_ts);
		}
		if (r->in_coll) {
			btjob__bind_text(st, 7, r->op);
			btjob__bind_text(st, 8, r->grp[0] ? r->grp : NULL);
			if (r->seq >= 0)
				sqlite3_bind_int64(st, 9, r->seq);
			sqlite3_bind_double(st, 10, r->entered);
		}
		if (r->last_done > 0)
			sqlite3_bind_double(st, 11, r->last_done);
		btjob__bind_text(st, 12, r->func[0] ? r->func : NULL);
		btjob__bind_text(st, 13, r->file[0] ? r->file : NULL);
		if (r->line > 0)
			sqlite3_bind_int(st, 14, r->line);
		state[0] = r->state;
		btjob__bind_text(st, 15, r->state ? state : NULL);
		btjob__bind_text(st, 16, r->wait[0] ? r->wait : NULL);
		btjob__bind_text(st, 17, r->locals[0] ? r->locals : NULL);
		err = btjob__step(st);
	}
	sqlite3_finalize(st);
	if (err)
		return err;
	/*
	 * The last minutes of the recording. ATTACH (store__copy_window) cannot run inside a
	 * transaction: what is written so far is committed (the file is still a temporary one,
	 * renamed once complete), and a transaction is open again for the snapshot's COMMIT.
	 */
	if (store__flush(session__store(rc->w->s)))
		pr_warn("the latest samples could not be written; the report has those before");
	n = segdir__since(rc->w->sd, from, &files);
	if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		return -EIO;
	err = store__copy_window(db, files, n, (int64_t)from, NULL, NULL);
	if (!err) {
		char *sql =
			sqlite3_mprintf("INSERT OR REPLACE INTO meta VALUES('start', %.6f);"
					"INSERT OR REPLACE INTO meta VALUES('end', %.6f);"
					"INSERT OR REPLACE INTO meta VALUES('duration', %.6f);"
					"INSERT OR REPLACE INTO meta VALUES('watch_report', 1);",
					from, rc->time, rc->time - from);

		if (!sql || sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
			err = -EIO;
		sqlite3_free(sql);
	}
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
		err = err ?: -EIO;
	return err;
}

/* Write DIR/latest-report: the path of the last report, for watch --dump. */
static void note_latest(struct watch *w, const char *path)
{
	char name[PATH_MAX], tmp[PATH_MAX + 8];
	FILE *f;

	snprintf(name, sizeof(name), "%s/%s", w->o->dir, LATEST_FILE);
	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	f = fopen(tmp, "we");
	if (!f)
		return;
	fprintf(f, "%s\n", path);
	if (fclose(f) || rename(tmp, name))
		unlink(tmp);
}

/* ---- a stall ----------------------------------------------------------------------------- */

/* The processes a snapshot reads: the watched ones that are alive. */
static int live_procs(struct watch *w, struct job_procs *jp)
{
	struct recorder_process *procs = NULL;
	pid_t *pids;
	int n, i, k = 0, rc;

	memset(jp, 0, sizeof(*jp));
	n = recorder__processes(session__recorder(w->s), &procs);
	if (n <= 0)
		return n;
	pids = calloc(n, sizeof(*pids));
	if (!pids) {
		free(procs);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		if (!kill(procs[i].pid, 0) &&
		    recorder__has_target(session__recorder(w->s), procs[i].pid))
			pids[k++] = procs[i].pid;
	free(procs);
	rc = k ? livejob__resolve(CMD, pids, k, false, jp) : EXIT_OK;
	free(pids);
	return rc == EXIT_OK ? 0 : -ESRCH;
}

/* Where the main thread of @pid is, from @j, into @r. */
/* "name=repr, ..." of @vs into @buf, each repr cut at 60 bytes, the whole at @size. */
static void locals_str(const struct bt_vars *vs, char *buf, size_t size)
{
	size_t len = 0;
	int k, n;

	buf[0] = '\0';
	for (k = 0; k < vs->n && len + 1 < size; k++) {
		const struct bt_var *v = &vs->v[k];

		n = snprintf(buf + len, size - len, "%s%s=%.60s%s", k ? ", " : "",
			     v->name ? v->name : "?", v->repr, strlen(v->repr) > 60 ? "..." : "");
		if (n < 0)
			break;
		len += (size_t)n < size - len ? (size_t)n : size - len - 1;
	}
}

static void where_from(const struct bt_job *j, struct dg_rank *r)
{
	const struct bt_thread *t = NULL;
	const struct bt_process *p = NULL;
	int i, k;

	for (i = 0; j && i < j->nprocs; i++)
		if (j->procs[i].pid == r->pid && j->procs[i].bt)
			p = j->procs[i].bt;
	if (!p || !p->nthreads)
		return;
	for (i = 0; i < p->nthreads; i++)
		if (p->threads[i].tid == p->pid)
			t = &p->threads[i];
	if (!t)
		t = &p->threads[0];
	r->state = t->state;
	backtrace__wait_str(t, r->wait, sizeof(r->wait));
	for (i = 0; i < t->nframes; i++)
		if (t->frames[i].kind == FRAME_PYTHON)
			break;
	if (i == t->nframes)
		i = 0; /* no Python frame: its innermost native one */
	/* In a collective: where the job called it, not torch.distributed's wrapper. */
	for (k = i; r->in_coll && k < t->nframes; k++)
		if (t->frames[k].kind == FRAME_PYTHON && t->frames[k].file &&
		    !strstr(t->frames[k].file, "-packages/torch/")) {
			i = k;
			break;
		}
	if (i < t->nframes) {
		const struct frame *f = &t->frames[i];

		snprintf(r->func, sizeof(r->func), "%s", f->qualname ? f->qualname : f->func);
		snprintf(r->file, sizeof(r->file), "%s", f->file ? f->file : "");
		r->line = f->line;
		if (t->locals && f->kind == FRAME_PYTHON)
			locals_str(&t->locals[i], r->locals, sizeof(r->locals));
	}
}

/* Was @pid named with -p, or is it the command started? */
static bool named(const struct watch *w, pid_t pid)
{
	int i;

	for (i = 0; i < w->o->npids; i++)
		if (w->o->pids[i] == pid)
			return true;
	return pid == w->root;
}

/*
 * The ranks for the diagnosis: the processes with a rank; if none has one, those alive and
 * those named (-p, the command) that ended.
 */
static int build_ranks(struct watch *w, const struct bt_job *j, struct dg_rank **out, int *world)
{
	struct recorder *rec = session__recorder(w->s);
	struct collectives *cs = recorder__collectives(rec);
	struct recorder_process *procs = NULL;
	struct dg_rank *rs;
	bool any_rank = false;
	int n, i, k = 0;
	size_t d;

	*world = -1;
	n = recorder__processes(rec, &procs);
	if (n < 0)
		return n;
	rs = calloc(n ? n : 1, sizeof(*rs));
	if (!rs) {
		free(procs);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		any_rank |= procs[i].job->rank >= 0;
	for (i = 0; i < n; i++) {
		const struct job_identity *id = procs[i].job;
		const struct call_now *c;
		struct dg_rank *r;
		bool dead = false, seen = false;
		int m;

		if (any_rank && id->rank < 0)
			continue;
		for (m = 0; m < k && !seen; m++)
			seen = rs[m].pid == procs[i].pid;
		if (seen)
			continue; /* pid reuse: the latest */
		for (d = 0; d < w->ndeaths; d++)
			dead |= w->deaths[d].pid == procs[i].pid;
		if (!dead && !recorder__has_target(rec, procs[i].pid))
			continue; /* ended before the watch saw how */
		if (dead && !any_rank && !named(w, procs[i].pid))
			continue; /* a helper that ended (a shell of a library's): not the job */
		r = &rs[k++];
		r->pid = procs[i].pid;
		r->rank = id->rank;
		r->seq = -1;
		if (id->world_size > 0)
			*world = id->world_size;
		if (id->rank >= 0)
			snprintf(r->label, sizeof(r->label), "rank %d (pid %d)", id->rank, r->pid);
		else
			snprintf(r->label, sizeof(r->label), "pid %d", r->pid);
		for (d = 0; d < w->ndeaths; d++)
			if (w->deaths[d].pid == r->pid) {
				r->dead = true;
				r->status = w->deaths[d].status;
				r->exit_ts = w->deaths[d].ts;
			}
		c = call_of(w, r->pid);
		if (c && !r->dead) {
			r->in_coll = true;
			snprintf(r->op, sizeof(r->op), "%s", c->op);
			snprintf(r->grp, sizeof(r->grp), "%s", c->grp);
			r->seq = c->seq;
			r->entered = c->entered;
		}
		if (cs)
			r->last_done = collectives__last_done(cs, r->pid) / 1e9;
		/* No collective done: its latest training step, where the hooks say. */
		if (!(r->last_done > 0) && w->steps)
			r->last_done = steps__last_move(w->steps, r->pid);
		if (!r->dead)
			where_from(j, r);
	}
	free(procs);
	*out = rs;
	return k;
}

/* Run --on-stall's command (at most once per interval) with the report in its environment. */
static void run_hook(struct watch *w, const char *reason, const struct dg_result *res)
{
	char num[32];
	double now = now_s();
	pid_t pid;

	if (!w->o->on_stall)
		return;
	if (w->hook_pid > 0 && waitpid(w->hook_pid, NULL, WNOHANG) == 0) {
		log_cmd(CMD,
			"--on-stall: the last command still runs; not run again for this stall");
		return;
	}
	w->hook_pid = 0;
	if (w->last_hook > 0 && now - w->last_hook < w->o->on_stall_interval_s) {
		log_cmd(CMD,
			"--on-stall: not run, it ran %.0f s ago (at most once per %.0f s: "
			"--on-stall-interval)",
			now - w->last_hook, w->o->on_stall_interval_s);
		return;
	}
	w->last_hook = now;
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		log_cmd(CMD, "cannot run --on-stall: %s", strerror(errno));
		return;
	}
	if (!pid) {
		int fd = open("/dev/null", O_RDONLY);

		if (fd >= 0) {
			dup2(fd, 0);
			close(fd);
		}
		signal(SIGPIPE, SIG_DFL);
		setenv("PROBING_WATCH_REPORT", w->report, 1);
		setenv("PROBING_WATCH_REASON", reason, 1);
		setenv("PROBING_WATCH_KIND", diagnose_kind_name(res->kind), 1);
		setenv("PROBING_WATCH_DIAGNOSIS", res->text, 1);
		snprintf(num, sizeof(num), "%d", (int)res->culprit);
		setenv("PROBING_WATCH_CULPRIT_PID", res->culprit ? num : "", 1);
		snprintf(num, sizeof(num), "%d", res->culprit_rank);
		setenv("PROBING_WATCH_CULPRIT_RANK",
		       res->culprit && res->culprit_rank >= 0 ? num : "", 1);
		execl("/bin/sh", "sh", "-c", w->o->on_stall, (char *)NULL);
		_exit(127);
	}
	w->hook_pid = pid;
}

static bool still_warming(struct watch *w, bool wait);

/* A stall (or a dump): snapshot, diagnosis, report, said. @declared: a stall, not a dump. */
static void capture(struct watch *w, const char *reason, double thr, bool declared)
{
	/* The job's libraries not read yet (a death in the job's first seconds) or still being
	 * read by the warm-up: no native frames (they would take seconds, and the launcher
	 * kills the other ranks in about one), the Python stacks and waits at once. */
	bool cold = still_warming(w, false) || (!w->warm && declared);
	struct bt_opts bo = {
		.native = w->o->native && !cold,
		.waits = true,
		.routines = true,
		.py_depth = SAMPLER_MAX_PYDEPTH,
		.locals = true, /* simple values read from outside: nothing is stopped */
		.max_repr = 200,
		.sym = cold ? NULL : w->sym,
	};
	struct collectives *cs = recorder__collectives(session__recorder(w->s));
	struct job_procs jp = {0};
	struct bt_job *j = NULL;
	struct dg_rank *ranks = NULL;
	struct dg_input in = {0};
	struct dg_result res;
	struct report_ctx rc;
	struct btjob_extra x = {
		.what = "watch report",
		.created_by = "probing watch",
		.schema = watch_schema,
		.write = write_report,
	};
	double t0 = now_s();
	char clk[16], *line, *save = NULL, text[sizeof(res.text)];
	int n, err;

	/* The calls, completions and exits the recorder has not handled yet (handled ahead
	 * of the samples: few), within half a second. */
	session__drain_urgent(w->s, 0.5);
	gather_calls(w, cs);
	if (live_procs(w, &jp))
		pr_info("some processes exited while the snapshot was taken");
	if (cold && w->o->native)
		pr_info("native frames left out of this report: the job's libraries are not read "
			"yet");
	if (jp.n && btjob__collect(&jp, &bo, &j))
		j = NULL;
	pr_info("snapshot of %d processes read in %.2f s", jp.n, now_s() - t0);
	/* The samples that wait (a backlog on a loaded machine), for the report's recording:
	 * after the snapshot, which cannot wait. */
	session__drain(w->s, 2.0);
	n = build_ranks(w, j, &ranks, &in.world_size);
	in.n = n > 0 ? n : 0;
	in.r = ranks;
	in.now = t0;
	diagnose(&in, &res);
	if (!declared && res.kind == DG_NONE)
		snprintf(res.text, sizeof(res.text), "no rank is watched\n");
	if (segdir__next_report(w->sd, w->report, sizeof(w->report)))
		w->report[0] = '\0';
	rc = (struct report_ctx){w, reason, t0, thr, &in, &res};
	x.arg = &rc;
	err = -EIO;
	if (w->report[0]) {
		if (!j) {
			/* Nothing could be read: a snapshot of no process still says so. */
			j = calloc(1, sizeof(*j));
			if (j)
				j->time = t0;
		}
		err = j ? btjob__save_with(j, w->report, OUTFILE_FORCE_HINT, &x) : -ENOMEM;
	}
	pr_info("report written in %.2f s", now_s() - t0);
	if (!err) {
		w->reports++;
		note_latest(w, w->report);
		segdir__prune_reports(w->sd, w->o->max_reports);
	}
	printf("probing watch: %s at %s: %s\n", declared ? "stall" : "report",
	       clock_str(t0, clk, sizeof(clk)), reason);
	snprintf(text, sizeof(text), "%s", res.text);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		printf("  %s\n", line);
	if (!err)
		printf("  report: %s (written in %.1f s)\n", w->report, now_s() - t0);
	else
		printf("  no report could be written (see above)\n");
	fflush(stdout);
	if (declared && !err)
		run_hook(w, reason, &res);
	if (!err)
		; /* keep the report's name for the recovery note */
	else
		w->report[0] = '\0';
	free(ranks);
	btjob__free(j);
	livejob__free(&jp);
}

/* The warm-up's snapshot, read and dropped (on its own thread). */
static void *warm_main(void *arg)
{
	struct watch *w = arg;
	struct bt_opts bo = {.native = true, .routines = true, .py_depth = 1, .sym = w->sym};
	struct bt_job *j = NULL;
	double t0 = now_s();

	prctl(PR_SET_NAME, "probing-warm"); /* its role, in top -H and /proc */

	if (!btjob__collect(&w->warm_jp, &bo, &j))
		pr_info("symbols of the job's libraries read in %.2f s", now_s() - t0);
	btjob__free(j);
	return NULL;
}

/*
 * Once the job's collectives run: a snapshot read and dropped, so that the symbolizer knows
 * the job's libraries before the first stall (reading libtorch's symbols takes a second, or
 * several on a loaded machine). On a thread of its own: the loop goes on meanwhile (a death
 * in the job's first seconds is handled at once).
 */
static void warm_up(struct watch *w)
{
	w->warm = true;
	if (!w->sym || live_procs(w, &w->warm_jp) || !w->warm_jp.n) {
		livejob__free(&w->warm_jp);
		return;
	}
	if (pthread_create(&w->warm_thread, NULL, warm_main, w)) {
		livejob__free(&w->warm_jp);
		return;
	}
	w->warming = true;
}

/* Is the warm-up's snapshot still being read? @wait: wait for it. */
static bool still_warming(struct watch *w, bool wait)
{
	if (!w->warming)
		return false;
	if (!wait && pthread_tryjoin_np(w->warm_thread, NULL))
		return true;
	if (wait)
		pthread_join(w->warm_thread, NULL);
	w->warming = false;
	livejob__free(&w->warm_jp);
	return false;
}

/*
 * Note the recovery at @now in the stall's report. A reader of the report (the --on-stall
 * command uploading it, someone's query) may hold it a moment: wait for it, up to 5 s. 0, or
 * -1 (said).
 */
static int note_recovery(struct watch *w, double now)
{
	sqlite3 *db = NULL;
	char *sql = NULL;
	int err = -1;

	if (sqlite3_open_v2(w->report, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL) !=
	    SQLITE_OK)
		goto cleanup;
	sqlite3_busy_timeout(db, 5000);
	sql = sqlite3_mprintf("UPDATE watch_stall SET recovered_at = %.6f", now);
	if (sql && sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK)
		err = 0;
cleanup:
	if (err)
		pr_warn("cannot note the recovery in %s: %s", w->report,
			db ? sqlite3_errmsg(db) : "out of memory");
	sqlite3_free(sql);
	sqlite3_close(db);
	return err;
}

/* The stall is over (@what moves again): note it in its report, then say so (a reader told
 * of the recovery finds it noted). */
static void recovered(struct watch *w, const char *what)
{
	double now = now_s();
	bool noted = w->report[0] && !note_recovery(w, now);
	char clk[16];

	printf("probing watch: recovered at %s, after %.0f s: %s again%s%s\n",
	       clock_str(now, clk, sizeof(clk)), now - w->stalled_at, what,
	       noted ? "; noted in " : "", noted ? w->report : "");
	fflush(stdout);
	w->stalled = false;
}

/*
 * Is there a stall now? Its reason into @reason and the threshold into *@thr: true. Else
 * *@due is when there would be one if nothing moved until then (unix seconds; 0: none can
 * be judged). The calls under way are gathered into w->calls. @cs may be NULL (no
 * collectives probed); @sp is the hooks' steps.
 */
static bool stall_now(struct watch *w, struct collectives *cs, const struct step_progress *sp,
		      char *reason, size_t size, double *thr, double *due)
{
	const struct call_now *worst = NULL;
	struct coll_progress p = {0};
	double now = now_s();
	size_t i;

	*due = 0;
	if (cs)
		collectives__progress(cs, &p);
	gather_calls(w, cs);
	*thr = threshold(w, &p);
	for (i = 0; i < w->ncalls; i++)
		if (!worst || w->calls[i].entered < worst->entered)
			worst = &w->calls[i];
	if (worst)
		*due = worst->entered + *thr;
	else if (p.completed)
		*due = p.last_done_ns / 1e9 + *thr;
	if (worst && now - worst->entered > *thr) {
		struct recorder_process *procs = NULL;
		int n = recorder__processes(session__recorder(w->s), &procs), k, rank = -1;

		for (k = 0; k < n; k++)
			if (procs[k].pid == worst->pid)
				rank = procs[k].job->rank;
		free(procs);
		if (rank >= 0)
			snprintf(reason, size,
				 "%s in flight on rank %d (pid %d) for %.0f s (threshold %.0f s)",
				 worst->op, rank, worst->pid, now - worst->entered, *thr);
		else
			snprintf(reason, size,
				 "%s in flight on pid %d for %.0f s (threshold %.0f s)", worst->op,
				 worst->pid, now - worst->entered, *thr);
		return true;
	}
	if (!w->ncalls && p.completed && now - p.last_done_ns / 1e9 > *thr) {
		snprintf(reason, size,
			 "no rank completed a collective for %.0f s (threshold %.0f s)",
			 now - p.last_done_ns / 1e9, *thr);
		return true;
	}
	/* No progress in collectives to judge by: the steps, where the hooks are in. */
	if (!w->ncalls && !p.completed && sp->procs) {
		double t = step_threshold(w, sp);

		if (t > 0)
			*due = sp->last_move + t;
		if (t > 0 && now - sp->last_move > t) {
			*thr = t;
			snprintf(reason, size,
				 "no training step for %.0f s (threshold %.0f s; at step %lld, by "
				 "the PyTorch hooks of %d process%s)",
				 now - sp->last_move, t, (long long)sp->step, sp->procs,
				 sp->procs == 1 ? "" : "es");
			return true;
		}
	}
	return false;
}

/*
 * At each turn of the loop, ten times a second at most (it waits up to WATCH_PACE_MS for
 * records, or until a stall would be due): a stall declared, or one that is over.
 */
static void check_stall(struct watch *w)
{
	struct collectives *cs = recorder__collectives(session__recorder(w->s));
	struct coll_progress p = {0};
	struct step_progress sp = {0};
	char reason[256];
	double now = now_s(), thr, due;

	w->due = 0;
	if (w->steps)
		steps__progress(w->steps, &sp);
	if (!cs && !sp.procs)
		return;
	if (w->stalled) {
		if (cs)
			collectives__progress(cs, &p);
		if (p.last_done_ns / 1e9 > w->stalled_at)
			recovered(w, "collectives complete");
		else if (sp.last_move > w->stalled_at)
			recovered(w, "training steps move");
		return;
	}
	/*
	 * What the recorder knows may be behind: a call seen under way may have completed in a
	 * record not handled yet. The records of collectives and processes are handled ahead
	 * of the samples (urgent_first): those that wait are handled first, and only a
	 * recorder that caught up with them judges (else: at the next check).
	 */
	if (session__drain_urgent(w->s, 0.5))
		return;
	if (!stall_now(w, cs, &sp, reason, sizeof(reason), &thr, &due)) {
		/* Woken when it would be due, not at the next drain. */
		w->due = due;
		session__wake_by(w->s, due > 0 ? now_mono_ns() / 1e9 + (due - now) + 0.01 : 0);
		return;
	}
	/* Judged again on every record written until now: what the reader has not read yet
	 * (it drains at a slow pace) may end the stall. */
	if (session__sync(w->s, WATCH_SYNC_MS) || session__drain_urgent(w->s, 0.5))
		return;
	if (!stall_now(w, cs, &sp, reason, sizeof(reason), &thr, &due))
		return;
	now = now_s();
	w->stalled = true;
	w->stalled_at = now;
	w->stalls++;
	capture(w, reason, thr, true);
}

static void on_exit_seen(void *ctx, pid_t pid, const struct job_identity *job, int status,
			 double ts)
{
	struct watch *w = ctx;
	struct death *d;
	size_t i;

	pr_debug("process %d (rank %d) ended: status 0x%x", pid, job->rank, status);
	for (i = 0; i < w->ndeaths; i++)
		if (w->deaths[i].pid == pid && w->deaths[i].ts == ts)
			return;
	if (grow_array(&w->deaths, &w->capdeaths, w->ndeaths + 1, sizeof(*w->deaths)))
		return;
	d = &w->deaths[w->ndeaths++];
	d->pid = pid;
	d->rank = job->rank;
	d->status = status;
	d->ts = ts;
	d->reported = false;
	/* A rank's failure is a stall at once (its peers may be killed soon by the launcher). */
	d->counts = status && (job->rank >= 0 || named(w, pid)); /* a rank, -p, the command */
	if (d->counts)
		w->death_pending = true;
}

/* ---- the loop --------------------------------------------------------------------------- */

static int start_segment(struct watch *w)
{
	char path[PATH_MAX];
	int err;

	err = segdir__next_segment(w->sd, path, sizeof(path));
	if (!err)
		err = session__rotate(w->s, path);
	if (!err)
		w->seg_start = now_s();
	return err;
}

/*
 * A death seen since the last turn: a stall (unless one is being reported), its reason the
 * first of them (by the kernel's time: the launcher kills the other ranks after it).
 */
static void report_death(struct watch *w)
{
	const struct death *first = NULL;
	char reason[256], how[96];
	size_t i;

	if (!w->death_pending)
		return;
	w->death_pending = false;
	for (i = 0; i < w->ndeaths; i++)
		if (w->deaths[i].counts && !w->deaths[i].reported &&
		    (!first || w->deaths[i].ts < first->ts))
			first = &w->deaths[i];
	for (i = 0; i < w->ndeaths; i++)
		w->deaths[i].reported = true;
	if (!first || w->stalled)
		return;
	if (first->rank >= 0)
		snprintf(reason, sizeof(reason), "rank %d (pid %d) %s", first->rank, first->pid,
			 diagnose_exit_str(first->status, how, sizeof(how)));
	else
		snprintf(reason, sizeof(reason), "pid %d %s", first->pid,
			 diagnose_exit_str(first->status, how, sizeof(how)));
	w->stalled = true;
	w->stalled_at = now_s();
	w->stalls++;
	capture(w, reason, 0, true);
}

/* Go on in a new segment; said if it cannot be started. */
static void next_segment(struct watch *w)
{
	if (start_segment(w))
		log_cmd(CMD, "cannot start a new segment in %s; the current one goes on",
			w->o->dir);
}

/*
 * --keep and --max-size: the current segment rotated once it takes a quarter of the size, the
 * oldest ones removed. Each look measures the current segment's files (lstat); the next look
 * comes when, growing twice as fast as it lately did, it could reach its quarter: ten times a
 * second near it (at a look once a second, a fast job's segment grew well past its quarter in
 * between), once a second far from it (ten looks a second were most of a long watch's
 * system calls).
 */
static void bound_size(struct watch *w)
{
	uint64_t quarter = w->o->max_bytes / 4, cur;
	double now = now_s(), wait = 1.0, rate;

	if (now < w->bound_next)
		return;
	if (w->o->max_bytes) {
		cur = segdir__current_bytes(w->sd);
		rate = cur >= w->bound_cur && now > w->bound_at
			       ? (cur - w->bound_cur) / (now - w->bound_at)
			       : 0; /* a new segment since */
		w->bound_rate = rate > w->bound_rate / 2 ? rate : w->bound_rate / 2;
		if (cur > quarter) {
			next_segment(w);
			cur = segdir__current_bytes(w->sd);
		}
		if (w->bound_rate > 0)
			wait = (cur < quarter ? quarter - cur : 0) / (2 * w->bound_rate);
		w->bound_cur = cur;
		w->bound_at = now;
	}
	segdir__prune(w->sd, w->o->keep_s, w->o->max_bytes);
	w->bound_next = now + (wait < 0.1 ? 0.1 : wait > 1.0 ? 1.0 : wait);
}

/* The processes whose PyTorch hooks' steps are asked for: those watched now. */
static void ask_steps_of(struct watch *w)
{
	struct recorder_process *procs = NULL;
	pid_t *pids;
	int n, i;

	if (!w->steps)
		return;
	n = recorder__processes(session__recorder(w->s), &procs);
	pids = n > 0 ? calloc(n, sizeof(*pids)) : NULL;
	if (pids) {
		for (i = 0; i < n; i++)
			pids[i] = procs[i].pid;
		steps__set_pids(w->steps, pids, n);
	}
	free(pids);
	free(procs);
}

static int on_turn(void *ctx, struct session *s, bool second)
{
	struct watch *w = ctx;

	(void)s;
	report_death(w);
	if (dump_asked) {
		dump_asked = 0;
		capture(w, "asked for (watch --dump or SIGUSR1)", 0, false);
	}
	/* Cheap (the calls under way, in memory): at most ten times a second; the loop wakes
	 * when a stall would be due (check_stall), so that it is declared at its threshold. */
	if (now_s() - w->last_check >= 0.1 || (w->due > 0 && now_s() >= w->due)) {
		w->last_check = now_s();
		check_stall(w);
		/* A death its drain handled: at once, not after this turn's other work. */
		report_death(w);
		bound_size(w);
	}
	if (!second)
		return 0;
	if (w->hook_pid > 0 && waitpid(w->hook_pid, NULL, WNOHANG) == w->hook_pid)
		w->hook_pid = 0;
	ask_steps_of(w);
	if (!w->warm && w->o->native && !w->stalled) {
		struct collectives *cs = recorder__collectives(session__recorder(w->s));
		struct coll_progress p;

		if (cs) {
			collectives__progress(cs, &p);
			if (p.completed)
				warm_up(w);
		}
	}
	if (now_s() - w->seg_start >= w->o->segment_s)
		next_segment(w);
	return 0;
}

int watch__run(const struct watch_opts *o)
{
	struct watch w = {.o = o};
	struct record_totals t;
	struct sigaction sa = {0};
	char first[PATH_MAX], id[64];
	int err, ret = EXIT_FAIL, i;

	w.so = (struct session_opts){
		.sampling = {.freq = o->freq,
			     .stack_size = SAMPLER_MAX_STACK,
			     .python = true,
			     .off_cpu = true,
			     .children = o->children || o->command},
		.recorder = {.native = true,
			     .py_depth = RECORDER_PY_DEPTH,
			     .names_every_s = WATCH_NAMES_EVERY_S},
		.store_flags = STORE_ROTATE,
		.comm = true,
		.pids = o->pids,
		.npids = o->npids,
		.command = o->command,
		.argc = o->argc,
		.argv = o->argv,
		.on_turn = on_turn,
		.turn_ctx = &w,
		.quiet = true,
		.urgent_first = true,
		.pace_ms = WATCH_PACE_MS,
	};
	for (i = 0; i < o->npids; i++)
		if (preflight_target(o->pids[i], false))
			return EXIT_FAIL;
	if (preflight_privileges() || preflight_pidns(&w.so.sampling.pidns_inum))
		return EXIT_FAIL;
	if (segdir__open(CMD, o->dir, &w.sd))
		return EXIT_FAIL;
	w.sym = symbolizer__new(); /* NULL: each snapshot has its own */
	if (segdir__next_segment(w.sd, first, sizeof(first)))
		goto cleanup;
	w.so.output = first;
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	if (session__open(&w.so, &w.s))
		goto cleanup;
	w.seg_start = now_s();
	/* In every segment (meta is written again in each): which of the segments in DIR are
	 * this watch's, for the readers of the directory (report/recwindow.h). */
	snprintf(id, sizeof(id), "%d-%.6f", (int)getpid(), w.seg_start);
	store__meta_text(session__store(w.s), "watch_id", id);
	w.root = session__child(w.s);
	recorder__on_exit(session__recorder(w.s), on_exit_seen, &w);
	if (steps__start(1.0, &w.steps))
		pr_warn("the PyTorch hooks' steps will not be followed (no thread)");
	log_cmd(CMD,
		"watching %s at %u Hz into %s (keep %.0f s, at most %.0f MB; stall threshold %s); "
		"SIGUSR1 or 'probing watch --dump %s' writes a report now",
		o->command ? o->command[0] : "the processes", o->freq, o->dir, o->keep_s,
		o->max_bytes / 1e6, o->stall_s > 0 ? "fixed" : "from the job's pace", o->dir);
	err = session__run(w.s);
	/* A death in the last records (the loop ends when /proc shows every process gone,
	 * maybe before their exits were handled), or a dump asked at the very end. */
	session__drain_urgent(w.s, 2.0);
	on_turn(&w, w.s, false);
	session__finish(w.s, &t);
	log_cmd(CMD, "watched %.0f s, %d stall%s, %d report%s in %s", t.seconds, w.stalls,
		w.stalls == 1 ? "" : "s", w.reports, w.reports == 1 ? "" : "s", o->dir);
	steps__stop(w.steps);
	w.steps = NULL;
	ret = (session__close(w.s) || err) ? EXIT_FAIL : EXIT_OK;
	w.s = NULL;
cleanup:
	still_warming(&w, true);
	if (w.hook_pid > 0)
		waitpid(w.hook_pid, NULL, 0);
	segdir__free(w.sd);
	symbolizer__free(w.sym);
	free(w.deaths);
	free(w.calls);
	return ret;
}

int watch__dump(const char *dir, double timeout_s)
{
	char name[PATH_MAX], before[PATH_MAX] = "", now[PATH_MAX];
	double end = now_s() + timeout_s;
	struct stat sb0 = {0}, sb;
	pid_t pid;
	FILE *f;

	pid = segdir__watcher(CMD, dir);
	if (pid == -ESRCH) {
		log_cmd(CMD,
			"no watch runs in %s (it has no watch.lock held by a running 'probing "
			"watch -o %s')",
			dir, dir);
		return EXIT_FAIL;
	}
	if (pid < 0)
		return EXIT_FAIL;
	snprintf(name, sizeof(name), "%s/%s", dir, LATEST_FILE);
	if (!stat(name, &sb0) && (f = fopen(name, "re"))) {
		if (!fgets(before, sizeof(before), f))
			before[0] = '\0';
		fclose(f);
	}
	if (kill(pid, SIGUSR1)) {
		log_cmd(CMD, "cannot signal the watch (pid %d): %s", (int)pid, strerror(errno));
		return EXIT_FAIL;
	}
	while (now_s() < end) {
		usleep(50000);
		if (stat(name, &sb) || (sb.st_mtim.tv_sec == sb0.st_mtim.tv_sec &&
					sb.st_mtim.tv_nsec == sb0.st_mtim.tv_nsec))
			continue;
		f = fopen(name, "re");
		if (!f)
			continue;
		if (!fgets(now, sizeof(now), f))
			now[0] = '\0';
		fclose(f);
		if (!now[0] || !strcmp(now, before))
			continue;
		fputs(now, stdout);
		return EXIT_OK;
	}
	log_cmd(CMD, "the watch (pid %d) wrote no report within %.0f s; its output says why",
		(int)pid, timeout_s);
	return EXIT_FAIL;
}
