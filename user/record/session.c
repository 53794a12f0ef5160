// SPDX-License-Identifier: MIT
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/jobinfo.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/util.h"
#include "record/collectives.h"
#include "record/comm.h"
#include "record/evqueue.h"
#include "record/launch.h"
#include "record/meta.h"
#include "record/session.h"
#include "record/store.h"

/* Records handled in a row at most this long before the turn's other work (ns). */
#define SESSION_BATCH_NS 2000000ULL
/*
 * Waited at most for a record before the turn's other work (ms): the ring buffer's reader
 * polls every 10 ms and wakes the loop when it queued records, so one wake-up per batch; the
 * turn's work is due at 20 ms at the earliest (blocked threads' stacks) or later.
 */

struct session {
	const struct session_opts *o;
	struct store *st;
	struct sampling *smp;
	struct recorder *rec;
	struct comm *comm; /* NULL: collectives not recorded */
	struct evqueue *q;
	struct launch child;		/* the command it started, if any */
	double start;			/* CLOCK_MONOTONIC seconds when sampling started */
	double start_real;		/* the same instant in unix seconds */
	double file_start;		/* unix seconds when the file being written started */
	double end;			/* CLOCK_MONOTONIC seconds when the loop ended */
	double wake_by;			/* session__wake_by (0: none) */
	struct recorder_process *procs; /* for the summary (session__finish) */
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static void catch_stop_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* Free the pipeline (the store aside). */
static void free_pipeline(struct session *s)
{
	evqueue__free(s->q);
	s->q = NULL;
	launch__end(&s->child);
	recorder__free(s->rec);
	s->rec = NULL;
	comm__free(s->comm); /* after the recorder, which uses it */
	s->comm = NULL;
	sampling__free(s->smp);
	s->smp = NULL;
}

/*
 * With --children: the descendants the targets have now become targets too (those they
 * create from now on are followed by the sampler, as every target's children are). A child
 * forked by a descendant before that descendant was a target is found by the next pass, so
 * passes go on until one finds nothing new. Processes that exit meanwhile are skipped.
 * Return the number of processes added.
 */
static int add_descendants(struct session *s)
{
	const struct session_opts *o = s->o;
	int pass, i, j, n, added, total = 0, err;
	pid_t *pids;

	for (pass = 0; pass < 16; pass++) {
		added = 0;
		for (i = 0; i < o->npids; i++) {
			if (jobinfo_descendants(o->pids[i], &pids, &n))
				continue; /* gone: its own exit is seen as any target's */
			for (j = 1; j < n; j++) {
				if (recorder__has_target(s->rec, pids[j]))
					continue;
				err = recorder__add_target(s->rec, pids[j], procinfo_ppid(pids[j]));
				if (!err)
					added++;
				else if (err != -ESRCH)
					pr_warn("cannot record process %d (a descendant of %d): %s",
						pids[j], o->pids[i], strerror(-err));
			}
			free(pids);
		}
		total += added;
		if (!added)
			break;
	}
	return total;
}

/*
 * Probe the targets' collectives libraries (comm.h). Recording goes on without them if the
 * kernel refuses their program (said with -v, and in meta.comm).
 */
static void start_comm(struct session *s)
{
	const struct session_opts *o = s->o;
	struct comm_opts co = {
		.stack_size = o->sampling.stack_size,
		.python = o->sampling.python,
		.pidns_inum = o->sampling.pidns_inum,
	};

	if (comm__open(s->smp, &co, &s->comm))
		return;
	if (recorder__use_comm(s->rec, s->comm)) {
		pr_info("collectives are not recorded: %s", strerror(ENOMEM));
		comm__free(s->comm);
		s->comm = NULL;
	}
}

/* Make the running processes of the options targets. 0 or -errno, said. */
static int add_pids(struct session *s)
{
	const struct session_opts *o = s->o;
	int i, err;

	for (i = 0; i < o->npids; i++) {
		err = recorder__add_target(s->rec, o->pids[i], 0);
		if (err == -ESRCH) {
			log_cmd("record", "process %d exited before recording started", o->pids[i]);
			return err;
		} else if (err) {
			pr_warn("cannot record process %d: %s", o->pids[i], strerror(-err));
			return err;
		}
	}
	if (o->sampling.children && o->npids) {
		i = add_descendants(s);
		pr_info("recording %d process%s and %d of %s descendants", o->npids,
			o->npids == 1 ? "" : "es", i, o->npids == 1 ? "its" : "their");
	}
	return 0;
}

/* Start the command of the options, make it a target, then let it run. 0 or -errno, said. */
static int add_command(struct session *s)
{
	char **command = s->o->command;
	int err;

	err = launch__start(&s->child, command);
	if (err) {
		pr_warn("cannot start %s: %s", command[0], strerror(-err));
		return err;
	}
	err = recorder__add_target(s->rec, s->child.pid, getpid());
	if (err) {
		pr_warn("cannot record %s: %s", command[0], strerror(-err));
		return err; /* still held: it never runs */
	}
	err = launch__release(&s->child);
	if (err)
		log_cmd("record", "cannot run '%s': %s", command[0], strerror(-err));
	return err;
}

/* A record of a process (fork, exec, exit) or of a collective: urgent_first's. */
static bool urgent_record(const void *rec, size_t len)
{
	const __u32 *type = rec;

	return len >= sizeof(*type) && (*type == EVENT_PROC || *type == EVENT_COMM);
}

int session__open(const struct session_opts *o, struct session **out)
{
	struct session *s;
	int err;

	catch_stop_signals();
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->o = o;
	s->child = (struct launch)LAUNCH_INIT;
	err = store__create(o->output, o->store_flags, &s->st);
	if (err)
		goto fail;
	store__set_frequency(s->st, o->sampling.freq);
	err = sampling__open(&o->sampling, &s->smp);
	if (err)
		goto fail;
	s->rec = recorder__new(s->st, s->smp, &o->recorder);
	if (!s->rec) {
		err = errno ? -errno : -ENOMEM;
		pr_warn("cannot start the recorder: %s", strerror(-err));
		goto fail;
	}
	if (o->comm)
		start_comm(s);
	err = add_pids(s);
	if (!err && o->command)
		err = add_command(s);
	if (err)
		goto fail;
	err = evqueue__start(s->smp, 0, o->pace_ms, o->urgent_first ? urgent_record : NULL,
			     recorder__seen, s->rec, &s->q);
	if (err) {
		pr_warn("cannot start the reader thread: %s", strerror(-err));
		goto fail;
	}
	s->start = now_mono_ns() / 1e9;
	s->start_real = now_real_ns() / 1e9;
	s->file_start = s->start_real;
	meta__write_start(s->st, o, s->start_real);
	pr_info("recording at %u Hz into %s (%s once complete)", o->sampling.freq,
		store__path(s->st), o->output);
	*out = s;
	return 0;
fail:
	/* A recording that never started is not left behind as an empty file. */
	free_pipeline(s);
	store__discard(s->st);
	free(s);
	return err;
}

static void show_progress(const struct session *s, double elapsed, uint64_t samples, int live)
{
	if (!stderr_is_tty() || log_verbosity > 0 || s->o->quiet)
		return;
	fprintf(stderr, "\rprobing: recording %d process%s: %.0f s, %llu samples   ", live,
		live == 1 ? "" : "es", elapsed, (unsigned long long)samples);
}

/*
 * Handle the records that wait, a batch at a time: waiting up to the pace for the
 * first, then those queued, for SESSION_BATCH_NS at most (checked every few records). 0, or the
 * error that ends the recording (said).
 */
static int handle_batch(struct session *s)
{
	uint64_t now = now_mono_ns(), until = now + SESSION_BATCH_NS;
	int pace = s->o->pace_ms ? (int)s->o->pace_ms : EVQUEUE_DEFAULT_PACE_MS;
	double due_ms = (s->wake_by - now / 1e9) * 1e3;
	unsigned int n;
	void *data;
	long len;
	int err;

	/* At least a millisecond: a caller whose due time passed is not spun for. Kept until
	 * it is reached: turns that end early (records came) wait for it again. */
	if (s->wake_by > 0 && due_ms < pace)
		pace = due_ms < 1 ? 1 : (int)due_ms;
	if (due_ms <= 0)
		s->wake_by = 0;
	for (n = 0;; n++) {
		if (n % 16 == 15 && now_mono_ns() >= until)
			return 0;
		len = evqueue__pop(s->q, n ? 0 : pace, &data);
		if (len <= 0)
			return 0;
		err = recorder__handle(s->rec, data, len);
		evqueue__release(s->q, data);
		if (err && err != -EINVAL) {
			pr_warn("recording failed: %s", strerror(-err));
			return err;
		}
	}
}

int session__run(struct session *s)
{
	double last_tick = s->start, now;
	uint64_t samples, lost;
	int err = 0, live = recorder__live_targets(s->rec), was_live = live;

	while (!stop_signal && live > 0) {
		/* The turn's other work (blocked threads' stacks fetched, a child reaped, the
		 * caller's turn) once per batch of records, not once per record: at the rate of
		 * a job's collectives and blocks, a system call per record was a good part of the
		 * recorder's time. */
		recorder__poll(s->rec);
		err = handle_batch(s);
		if (err)
			break;
		live = recorder__live_targets(s->rec);
		now = now_mono_ns() / 1e9;
		/* Reaped, the command is no longer a live target (its CPU time is kept): as soon as
		 * a target ends (the command may be it), else once a second (a wait4 at every turn
		 * was most of a watch's system calls). */
		if (live != was_live || now - last_tick >= 1.0)
			launch__reaped(&s->child);
		was_live = live;
		if (now - last_tick >= 1.0) {
			last_tick = now;
			live = recorder__tick(s->rec, !evqueue__queued(s->q));
			if (live < 0) {
				err = live;
				pr_warn("cannot write %s: %s", s->o->output, strerror(-err));
				break;
			}
			sampling__stats(s->smp, &samples, &lost);
			show_progress(s, now - s->start, samples, live);
			if (s->o->on_turn && (err = s->o->on_turn(s->o->turn_ctx, s, true)))
				break;
		} else if (s->o->on_turn && (err = s->o->on_turn(s->o->turn_ctx, s, false))) {
			break;
		}
		if (s->o->duration > 0 && now - s->start >= s->o->duration)
			break;
	}
	s->end = now_mono_ns() / 1e9;
	if (stderr_is_tty() && log_verbosity == 0 && !s->o->quiet)
		fputs("\r\033[K", stderr); /* the progress line */
	return err > 0 ? 0 : err;
}

int session__rotate(struct session *s, const char *path)
{
	struct collectives *cs = recorder__collectives(s->rec);
	double now = now_real_ns() / 1e9;
	int err;

	if (store__is_open(s->st)) {
		recorder__store_threads(s->rec);
		store__meta_real(s->st, "end", now);
		store__meta_real(s->st, "duration", now - s->file_start);
	}
	err = store__rotate(s->st, path);
	if (err)
		return err;
	s->file_start = now;
	store__meta_real(s->st, "start", now);
	/* Not this file's: the previous one's end. */
	store__meta_real(s->st, "end", now);
	store__meta_real(s->st, "duration", 0);
	return cs ? collectives__rewrite(cs) : 0;
}

int session__drain(struct session *s, double budget_s)
{
	double end = now_mono_ns() / 1e9 + budget_s;
	void *data;
	long len;
	int n = 0;

	while (now_mono_ns() / 1e9 < end && (len = evqueue__pop(s->q, 0, &data)) > 0) {
		recorder__handle(s->rec, data, len);
		evqueue__release(s->q, data);
		n++;
	}
	return n;
}

int session__sync(struct session *s, int timeout_ms)
{
	return evqueue__sync(s->q, timeout_ms);
}

void session__wake_by(struct session *s, double mono_s)
{
	s->wake_by = mono_s;
}

int session__drain_urgent(struct session *s, double budget_s)
{
	double end = now_mono_ns() / 1e9 + budget_s;
	void *data;
	long len;

	while ((len = evqueue__pop_urgent(s->q, &data)) > 0) {
		recorder__handle(s->rec, data, len);
		evqueue__release(s->q, data);
		if (now_mono_ns() / 1e9 >= end)
			return evqueue__urgent_waiting(s->q) ? -EAGAIN : 0;
	}
	return 0;
}

struct store *session__store(const struct session *s)
{
	return s->st;
}

struct recorder *session__recorder(const struct session *s)
{
	return s->rec;
}

pid_t session__child(const struct session *s)
{
	return s->child.pid;
}

/* What the collectives probes recorded, into @t. */
static void comm_totals(struct session *s, struct record_totals *t)
{
	struct comm_stats cst;
	const char *notes;

	t->comm_state = !s->o->comm ? "off" : s->comm ? "on" : "unavailable";
	if (!s->comm)
		return;
	recorder__comm_counts(s->rec, &t->comm_rows, &t->comm_completed, &t->comm_processes);
	recorder__comm_stacks(s->rec, &t->comm_copies, &t->comm_site_calls);
	comm__stats(s->comm, &cst);
	t->comm_lost = cst.lost;
	t->comm_ub_detached = cst.ub_detached;
	t->comm_ub_attached_again = cst.ub_attached_again;
	t->comm_p2p_unwatched = cst.p2p_unwatched;
	notes = comm__notes(s->comm);
	snprintf(t->comm_notes, sizeof(t->comm_notes), "%s", notes ? notes : "");
	if (recorder__comm_summary(s->rec, t->comm_summary, sizeof(t->comm_summary)))
		t->comm_summary[0] = '\0';
}

void session__finish(struct session *s, struct record_totals *t)
{
	struct rusage ru;
	double cpu;
	void *data;
	long len;
	int err;

	memset(t, 0, sizeof(*t));
	t->start = s->start_real;
	t->seconds = s->end - s->start;
	t->stop_signal = stop_signal;
	/* No off-CPU time after the end; what the sweep had not sent yet goes out the same way
	 * as the rest, then everything the kernel sent is stored. */
	err = sampling__offcpu_stop(s->smp); /* and the stacks of blocks still going on */
	if (err)
		pr_debug("cannot fetch the stacks of blocks still going on: %s", strerror(-err));
	err = sampling__offcpu_flush(s->smp);
	if (err)
		pr_warn("cannot send the last off-CPU time: %s", strerror(-err));
	evqueue__stop(s->q);
	while ((len = evqueue__pop(s->q, 0, &data)) > 0) {
		recorder__handle(s->rec, data, len);
		evqueue__release(s->q, data);
	}
	if (recorder__finish(s->rec))
		pr_warn("cannot count the last off-CPU time: out of memory");
	sampling__offcpu_stats(s->smp, &t->off);
	sampling__stats(s->smp, &t->seen, &t->lost);
	t->lost += evqueue__dropped(s->q);
	t->lost_events = sampling__lost_events(s->smp);
	recorder__tick(s->rec, true);
	recorder__stats(s->rec, &t->rs);
	t->live = recorder__live_targets(s->rec);
	/* /proc misses what a reaped command used after the last tick; wait4 has it all. */
	cpu = recorder__target_cpu(s->rec);
	t->target_cpu = cpu > s->child.cpu ? cpu : s->child.cpu;
	/* Our own threads only (RUSAGE_SELF excludes the command we started). */
	getrusage(RUSAGE_SELF, &ru);
	t->recorder_cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
			  (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	if (sampling__prog_stats(s->smp, &t->bpf_ns, &t->bpf_runs))
		t->bpf_ns = t->bpf_runs = 0;
	free(s->procs);
	t->nprocs = recorder__processes(s->rec, &s->procs);
	if (t->nprocs < 0)
		t->nprocs = 0; /* the summary goes without the ranks */
	t->procs = s->procs;
	comm_totals(s, t);
	meta__write_end(s->st, t);
}

int session__close(struct session *s)
{
	int err;

	if (!s)
		return 0;
	free_pipeline(s);
	err = store__close(s->st);
	free(s->procs);
	free(s);
	return err;
}
