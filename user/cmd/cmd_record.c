// SPDX-License-Identifier: MIT
/* probing record: sample processes into a recording file. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cli.h"
#include "record/evqueue.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "record/recorder.h"
#include "record/sampling.h"
#include "record/store.h"
#include "base/util.h"

#define CMD "record"

static const char usage_text[] =
	"Usage: probing record [OPTIONS] -p PID[,PID...]\n"
	"       probing record [OPTIONS] -- COMMAND [ARGS...]\n"
	"\n"
	"Sample the native and Python stacks of every thread of running processes, or of a\n"
	"command it starts (not both), into a recording file (SQLite). Python frames (CPython\n"
	"3.8-3.13) are merged with the native frames: C extensions and libraries appear under\n"
	"the Python function that called them. Recording ends after -d seconds, on Ctrl-C or\n"
	"SIGTERM, or when every target has exited; the data is saved in every case.\n"
	"Needs root (or the capabilities CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE).\n"
	"Sampling is on-CPU: a thread that sleeps or waits the whole time has no samples.\n"
	"Pids are those of the PID namespace probing runs in (inside a container, the\n"
	"container's; on the host, the host's); docs/sql.md has the details.\n"
	"\n"
	"Options:\n"
	"  -p, --pid PID[,PID...]  processes to record (all their threads); kernel threads\n"
	"                          only with --kernel\n"
	"  -F, --freq HZ           samples per second per CPU, 1-10000 (default 99)\n"
	"  -d, --duration SECONDS  stop after this long (default: until Ctrl-C or exit)\n"
	"  -o, --output FILE       recording to write (default probing.db). While recording, the\n"
	"                          data is in FILE.partial, readable at any time; it becomes\n"
	"                          FILE when recording ends (a killed recorder leaves it as\n"
	"                          FILE.partial). An existing FILE is replaced then, keeping its\n"
	"                          permissions; a symbolic link is followed; anything but a\n"
	"                          regular file is refused\n"
	"      --force             replace FILE even if it is read-only\n"
	"      --stack-size SIZE   most bytes of user stack copied per sample, 8K-64K (default\n"
	"                          64K); a sample copies only the part of its thread's stack in\n"
	"                          use, so this bounds what deep stacks cost (Python 3.8-3.10\n"
	"                          use about 0.5K per Python call); deeper stacks are kept but\n"
	"                          marked as not unwound to their outermost frame\n"
	"      --kernel            also record kernel stacks\n"
	"      --no-python         do not read Python stacks (native frames only)\n"
	"      --py-depth N        Python frames read per sample, 1-1024 (default 128); deeper\n"
	"                          stacks keep their innermost N frames and are marked truncated\n"
	"      --no-native         do not unwind native stacks (keep only the function that was\n"
	"                          running)\n"
	"      --children          also record child processes the targets start\n"
	"  -v, --verbose           more diagnostics (repeat for more)\n"
	"  -h, --help              this help\n"
	"\n"
	"Examples:\n"
	"  sudo probing record -p 1234 -F 999 -d 10 -o app.db\n"
	"  sudo probing record -o app.db -- ./myprog --input data.bin\n"
	"  probing flamegraph -i app.db -o app.svg\n";

enum {
	OPT_STACK_SIZE = 256,
	OPT_KERNEL,
	OPT_NO_NATIVE,
	OPT_NO_PYTHON,
	OPT_CHILDREN,
	OPT_PY_DEPTH,
	OPT_FORCE,
};

static const struct option long_opts[] = {
	{"pid", required_argument, NULL, 'p'},
	{"freq", required_argument, NULL, 'F'},
	{"duration", required_argument, NULL, 'd'},
	{"output", required_argument, NULL, 'o'},
	{"stack-size", required_argument, NULL, OPT_STACK_SIZE},
	{"kernel", no_argument, NULL, OPT_KERNEL},
	{"no-native", no_argument, NULL, OPT_NO_NATIVE},
	{"no-python", no_argument, NULL, OPT_NO_PYTHON},
	{"py-depth", required_argument, NULL, OPT_PY_DEPTH},
	{"children", no_argument, NULL, OPT_CHILDREN},
	{"force", no_argument, NULL, OPT_FORCE},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{"target", required_argument, NULL, 't'},
	{},
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

/* "16K", "16k", "16384" -> bytes. */
static int parse_size(const char *s, long *out)
{
	char buf[64];
	size_t n = strlen(s);
	long mult = 1;

	if (!n || n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, n + 1);
	if (buf[n - 1] == 'k' || buf[n - 1] == 'K') {
		mult = 1024;
		buf[n - 1] = '\0';
	}
	if (parse_long(buf, 0, 1 << 30, out))
		return -EINVAL;
	*out *= mult;
	return 0;
}

/* Say which capabilities are missing; return EXIT_FAIL if recording cannot work. */
static int check_privileges(void)
{
	char missing[128] = "";
	pid_t self = getpid();
	bool admin;

	if (geteuid() == 0)
		return 0;
	admin = procinfo_has_cap(self, CAP_SYS_ADMIN);
	if (!admin && !procinfo_has_cap(self, CAP_BPF))
		strcat(missing, " CAP_BPF");
	if (!admin && !procinfo_has_cap(self, CAP_PERFMON))
		strcat(missing, " CAP_PERFMON");
	if (!procinfo_has_cap(self, CAP_SYS_PTRACE))
		strcat(missing, " CAP_SYS_PTRACE");
	if (!missing[0])
		return 0;
	fprintf(stderr,
		"probing record: not running as root, and missing the capabilities:%s.\n"
		"Recording loads BPF programs (CAP_BPF), opens perf events on every CPU "
		"(CAP_PERFMON) and\nreads the targets' memory maps and stacks (CAP_SYS_PTRACE). "
		"Run it with sudo.\n",
		missing);
	return EXIT_FAIL;
}

/*
 * Start @argv stopped before exec: the child waits on a pipe until it is a target, so no
 * sample of it is missed. *@release is the write end to close to let it go; exec errors
 * come back through a close-on-exec pipe (*@errfd).
 */
static pid_t spawn_held(char **argv, int *release, int *errfd)
{
	int go[2] = {-1, -1}, err[2] = {-1, -1};
	pid_t pid;
	char c;
	int e;

	if (pipe2(go, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
		e = errno;
		goto fail;
	}
	pid = fork();
	if (pid < 0) {
		e = errno;
		goto fail;
	}
	if (pid == 0) {
		close(go[1]);
		close(err[0]);
		/* Wait until the parent has made us a target (or died). */
		while (read(go[0], &c, 1) < 0 && errno == EINTR)
			;
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		execvp(argv[0], argv);
		e = errno;
		if (write(err[1], &e, sizeof(e)) < 0)
			_exit(127);
		_exit(127);
	}
	close(go[0]);
	close(err[1]);
	*release = go[1];
	*errfd = err[0];
	return pid;
fail:
	if (go[0] >= 0) {
		close(go[0]);
		close(go[1]);
	}
	if (err[0] >= 0) {
		close(err[0]);
		close(err[1]);
	}
	errno = e;
	return -1;
}

/* Record the recording's own facts in meta. */
static void write_meta(struct store *st, unsigned int freq, unsigned int stack_size, double start,
		       double end, int argc, char **argv)
{
	struct strbuf cmd = {};
	struct utsname u;
	char host[256] = "";
	int i;

	if (!uname(&u)) {
		store__meta_text(st, "kernel", u.release);
		snprintf(host, sizeof(host), "%s", u.nodename);
		store__meta_text(st, "host", host);
	}
	for (i = 0; i < argc; i++)
		sb_printf(&cmd, "%s%s", i ? " " : "probing ", argv[i]);
	store__meta_text(st, "command", sb_str(&cmd));
	sb_free(&cmd);
	store__meta_int(st, "frequency", freq);
	store__meta_int(st, "stack_size", stack_size);
	store__meta_text(st, "clock", "cpu-clock");
	store__meta_text(st, "probing_version", "0.1.0");
	store__meta_real(st, "start", start);
	if (end > 0) {
		store__meta_real(st, "end", end);
		store__meta_real(st, "duration", end - start);
	}
}

#define PROC_PID_INIT_INO 0xEFFFFFFCu /* include/linux/proc_ns.h: the initial PID namespace */

/*
 * The PID namespace whose numbers the recording uses: the one probing runs in, whose /proc
 * it reads. *@inum: its inode number, 0 for the initial namespace (the kernel's own pids,
 * which the sampler gets for free). Return 0, or EXIT_FAIL after saying why not.
 */
static int recording_pidns(__u32 *inum)
{
	char buf[32];
	struct stat sb;
	ssize_t n;
	long self = 0;

	n = readlink("/proc/self", buf, sizeof(buf) - 1);
	if (n > 0)
		buf[n] = '\0';
	if (n <= 0 || parse_long(buf, 1, INT_MAX, &self) || stat("/proc/self/ns/pid", &sb)) {
		fprintf(stderr,
			"probing record: cannot read /proc/self (%s); recording needs /proc\n",
			n <= 0 ? strerror(errno) : "unexpected contents");
		return EXIT_FAIL;
	}
	if (self != getpid()) {
		fprintf(stderr,
			"probing record: /proc belongs to another PID namespace than probing: it "
			"calls this process %ld, the process itself %d.\n"
			"The recorder matches what it samples with /proc. Mount a /proc for this "
			"namespace (unshare --pid --fork --mount-proc ...), or run probing outside "
			"it.\n",
			self, (int)getpid());
		return EXIT_FAIL;
	}
	*inum = sb.st_ino == PROC_PID_INIT_INO ? 0 : (__u32)sb.st_ino;
	if (*inum)
		pr_info("in PID namespace %u: pids are this namespace's", *inum);
	return 0;
}

/* Refuse kernel threads without --kernel: they have no user space to sample. */
static int check_not_kernel_thread(pid_t pid, bool kernel)
{
	char name[64] = "?";

	if (kernel || procinfo_is_kernel_thread(pid) != 1)
		return 0;
	procinfo_thread_name(pid, pid, name, sizeof(name));
	fprintf(stderr,
		"probing record: process %d (%s) is a kernel thread: it has no user space, so "
		"there is no user stack and no Python to sample.\n"
		"Add --kernel to record its kernel stacks.\n",
		(int)pid, name);
	return EXIT_FAIL;
}

/*
 * A recording without samples says why. @cpu: CPU seconds the targets used while recorded
 * (from /proc: 10 ms granularity); @seen: samples of targets the sampler saw; @live: targets
 * still running at the end; @secs: how long it recorded. Return EXIT_FAIL when the targets
 * ran but were not sampled (a fault of the recorder), else EXIT_OK: an empty recording of
 * idle or short-lived processes is a true result.
 */
static int explain_no_samples(double cpu, uint64_t seen, int live, double secs, unsigned int freq)
{
	double period_ms = 1000.0 / freq;

	if (seen)
		return EXIT_OK; /* sampled, but every sample was lost: said above */
	if (cpu * freq >= 5) {
		fprintf(stderr,
			"probing record: no samples, although the recorded processes used %.2f s "
			"of "
			"CPU time while recorded (about %.0f samples at %u Hz): the sampler did "
			"not "
			"see them run.\n"
			"This is a fault of probing; please report it with the output of 'probing "
			"record -vv ...'.\n",
			cpu, cpu * freq, freq);
		return EXIT_FAIL;
	}
	if (live)
		fprintf(stderr,
			"probing: no samples: the recorded process%s did not run on a CPU at any "
			"sampling tick (%.0f ms of CPU time in %.1f s): %s blocked or sleeping. "
			"Sampling records threads only while they run on a CPU.\n",
			live == 1 ? "" : "es", cpu * 1000, secs,
			live == 1 ? "it was" : "they were");
	else
		fprintf(stderr,
			"probing: no samples: the recorded processes exited after %.1f ms of CPU "
			"time, %s one sampling period (%.1f ms at %u Hz), and were not running at "
			"any sampling tick. A higher -F may catch them.\n",
			cpu * 1000, cpu * 1000 < period_ms ? "less than" : "about", period_ms,
			freq);
	return EXIT_OK;
}

static void progress(double elapsed, uint64_t samples, int live)
{
	if (!stderr_is_tty() || log_verbosity > 0)
		return;
	fprintf(stderr, "\rprobing: recording %d process%s: %.0f s, %llu samples   ", live,
		live == 1 ? "" : "es", elapsed, (unsigned long long)samples);
}

int cmd_record(int argc, char **argv)
{
	struct sampling_opts sopts = {.freq = 99, .stack_size = SAMPLER_MAX_STACK, .python = true};
	struct recorder_opts ropts = {.native = true, .python = true, .py_depth = 128};
	const char *output = "probing.db";
	struct sampling *smp = NULL;
	struct recorder *rec = NULL;
	struct recorder_stats rs;
	struct evqueue *q = NULL;
	struct store *st = NULL;
	struct sigaction sa;
	pid_t *pids = NULL, child = -1;
	char **command = NULL;
	int npids = 0, c, i, err, ret = EXIT_FAIL, release = -1, errfd = -1, live = 0;
	double duration = 0, start, last_tick, now, end = 0, start_real;
	uint64_t samples = 0, lost = 0, dropped, bpf_ns, bpf_runs, lost_events;
	unsigned int store_flags = 0;
	struct rusage child_ru = {};
	double child_cpu = 0;
	bool started = false;
	long v;
	void *data;
	long len;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, "+:p:F:d:o:t:vh", long_opts, NULL)) != -1) {
		switch (c) {
		case 'p':
		case 't':
			free(pids);
			pids = NULL;
			if (cli_parse_pids(optarg, &pids, &npids))
				return cli_usage_error(CMD, "'%s' is not a PID or a list of PIDs",
						       optarg);
			break;
		case 'F':
			if (parse_long(optarg, 1, SAMPLER_MAX_FREQ, &v))
				return cli_usage_error(
					CMD,
					"frequency '%s' must be a whole number of Hz from 1 to %d",
					optarg, SAMPLER_MAX_FREQ);
			sopts.freq = v;
			break;
		case 'd':
			if (parse_seconds(optarg, 0.001, 1e7, &duration))
				return cli_usage_error(CMD,
						       "duration '%s' must be a positive number "
						       "of seconds",
						       optarg);
			break;
		case 'o':
			output = optarg;
			break;
		case OPT_STACK_SIZE:
			if (parse_size(optarg, &v) || v < 8192 || v > SAMPLER_MAX_STACK)
				return cli_usage_error(
					CMD, "stack size '%s' must be from 8K to 64K", optarg);
			sopts.stack_size = v;
			break;
		case OPT_KERNEL:
			sopts.kernel = ropts.kernel = true;
			break;
		case OPT_NO_NATIVE:
			ropts.native = false;
			break;
		case OPT_NO_PYTHON:
			sopts.python = ropts.python = false;
			break;
		case OPT_PY_DEPTH:
			if (parse_long(optarg, 1, SAMPLER_MAX_PYDEPTH, &v))
				return cli_usage_error(CMD,
						       "Python depth '%s' must be from 1 to %d",
						       optarg, SAMPLER_MAX_PYDEPTH);
			ropts.py_depth = v;
			break;
		case OPT_CHILDREN:
			sopts.children = true;
			break;
		case OPT_FORCE:
			store_flags |= STORE_FORCE;
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return EXIT_OK;
		default:
			return cli_bad_option(CMD, c, argv);
		}
	}
	if (optind < argc) {
		/* "--" ends the options; getopt leaves optind after it. */
		if (strcmp(argv[optind - 1], "--")) {
			free(pids);
			return cli_usage_error(CMD,
					       "unexpected argument '%s' (put the command "
					       "to run after '--')",
					       argv[optind]);
		}
		command = argv + optind;
	}
	if (!npids && !command)
		return cli_usage_error(CMD, "say what to record: -p PID, or -- COMMAND");
	if (npids && command) {
		free(pids);
		return cli_usage_error(CMD,
				       "give either -p PID or a command after '--', not both (to "
				       "record a process for a fixed time, use -p PID -d SECONDS)");
	}
	if (!ropts.native)
		sopts.stack_size = 0;

	for (i = 0; i < npids; i++)
		if (cli_check_pid(CMD, pids[i]) || check_not_kernel_thread(pids[i], sopts.kernel))
			goto cleanup;
	if (check_privileges() || recording_pidns(&sopts.pidns_inum))
		goto cleanup;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	err = store__create(output, store_flags, &st);
	if (err)
		goto cleanup;
	err = sampling__open(&sopts, &smp);
	if (err)
		goto cleanup;
	rec = recorder__new(st, smp, &ropts);
	if (!rec) {
		pr_warn("cannot start the recorder: %s", strerror(errno));
		goto cleanup;
	}
	for (i = 0; i < npids; i++) {
		err = recorder__add_target(rec, pids[i], 0);
		if (err == -ESRCH) {
			fprintf(stderr,
				"probing record: process %d exited before recording started\n",
				pids[i]);
			goto cleanup;
		} else if (err) {
			pr_warn("cannot record process %d: %s", pids[i], strerror(-err));
			goto cleanup;
		}
	}
	if (command) {
		child = spawn_held(command, &release, &errfd);
		if (child < 0) {
			pr_warn("cannot start %s: %s", command[0], strerror(errno));
			goto cleanup;
		}
		err = recorder__add_target(rec, child, getpid());
		close(release); /* let it exec */
		release = -1;
		if (!err && read(errfd, &err, sizeof(err)) == sizeof(err)) {
			fprintf(stderr, "probing record: cannot run '%s': %s\n", command[0],
				strerror(err));
			waitpid(child, NULL, 0);
			child = -1;
			goto cleanup;
		}
		if (err) {
			pr_warn("cannot record %s: %s", command[0], strerror(-err));
			goto cleanup;
		}
	}
	err = evqueue__start(smp, 0, &q);
	if (err) {
		pr_warn("cannot start the reader thread: %s", strerror(-err));
		goto cleanup;
	}
	start = now_mono_ns() / 1e9;
	last_tick = start;
	started = true;
	start_real = now_real_ns() / 1e9;
	write_meta(st, sopts.freq, sopts.stack_size, start_real, 0, argc, argv);
	pr_info("recording at %u Hz into %s (%s once complete)", sopts.freq, store__path(st),
		output);
	live = recorder__live_targets(rec);

	while (!stop_signal && live > 0) {
		recorder__poll(rec);
		len = evqueue__pop(q, 5, &data);
		if (len > 0) {
			err = recorder__handle(rec, data, len);
			free(data);
			if (err && err != -EINVAL) {
				pr_warn("recording failed: %s", strerror(-err));
				break;
			}
			live = recorder__live_targets(rec);
		}
		now = now_mono_ns() / 1e9;
		if (child > 0 && wait4(child, NULL, WNOHANG, &child_ru) == child) {
			child = -1; /* reaped: it is no longer a live target */
			child_cpu = child_ru.ru_utime.tv_sec + child_ru.ru_stime.tv_sec +
				    (child_ru.ru_utime.tv_usec + child_ru.ru_stime.tv_usec) / 1e6;
		}
		if (now - last_tick >= 1.0) {
			last_tick = now;
			live = recorder__tick(rec);
			if (live < 0) {
				pr_warn("cannot write %s: %s", output, strerror(-live));
				break;
			}
			sampling__stats(smp, &samples, &lost);
			progress(now - start, samples, live);
		}
		if (duration > 0 && now - start >= duration)
			break;
	}
	end = now_mono_ns() / 1e9;
	if (stderr_is_tty() && log_verbosity == 0)
		fputs("\r\033[K", stderr);

	/* Everything the kernel sent before we stopped is stored. */
	evqueue__stop(q);
	while ((len = evqueue__pop(q, 0, &data)) > 0) {
		recorder__handle(rec, data, len);
		free(data);
	}
	sampling__stats(smp, &samples, &lost);
	dropped = evqueue__dropped(q);
	recorder__tick(rec);
	recorder__stats(rec, &rs);
	write_meta(st, sopts.freq, sopts.stack_size, start_real, start_real + (end - start), argc,
		   argv);
	store__meta_int(st, "samples", rs.samples);
	store__meta_int(st, "lost", lost + dropped);
	store__meta_int(st, "complete_native_stacks", rs.complete);
	ret = EXIT_OK;
	if (stop_signal)
		pr_info("stopping on signal %d", (int)stop_signal);

	fprintf(stderr,
		"probing: recorded %llu samples (%llu lost) of %llu thread%s in %llu process%s "
		"over %.1f s -> %s\n",
		(unsigned long long)rs.samples, (unsigned long long)(lost + dropped),
		(unsigned long long)rs.threads, rs.threads == 1 ? "" : "s",
		(unsigned long long)rs.processes, rs.processes == 1 ? "" : "es", end - start,
		output);
	if (lost + dropped)
		fprintf(stderr,
			"probing: %llu samples were lost because the recorder could not "
			"keep up; try a lower -F or a smaller --stack-size\n",
			(unsigned long long)(lost + dropped));
	lost_events = sampling__lost_events(smp);
	if (lost_events)
		fprintf(stderr,
			"probing: %llu process events (new processes, exits, thread names) were "
			"lost because the recorder could not keep up; some processes may lack "
			"their "
			"command line or end time\n",
			(unsigned long long)lost_events);
	if (!rs.samples) {
		double cpu = recorder__target_cpu(rec);

		ret = explain_no_samples(cpu > child_cpu ? cpu : child_cpu, samples,
					 recorder__live_targets(rec), end - start, sopts.freq);
	}
	{
		struct rusage ru;
		double cpu;

		/* Our own threads only (RUSAGE_SELF excludes the command we started). */
		getrusage(RUSAGE_SELF, &ru);
		cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
		      (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
		store__meta_real(st, "recorder_cpu", cpu);
		pr_info("recorder CPU time: %.3f s (%.1f us per sample)", cpu,
			rs.samples ? 1e6 * cpu / rs.samples : 0.0);
	}
	if (!sampling__prog_stats(smp, &bpf_ns, &bpf_runs) && bpf_runs) {
		/* Only with kernel.bpf_stats_enabled=1: the cost inside the sampled context. */
		store__meta_int(st, "bpf_run_ns", bpf_ns);
		store__meta_int(st, "bpf_runs", bpf_runs);
		pr_info("BPF program: %.2f ms in %llu runs, %.2f us per recorded sample",
			bpf_ns / 1e6, (unsigned long long)bpf_runs,
			rs.samples ? bpf_ns / 1e3 / rs.samples : 0.0);
	}
	if (rs.py_status[PY_OK] + rs.py_status[PY_NO_TSTATE] + rs.py_status[PY_READ_ERROR] +
	    rs.py_status[PY_BAD_TSTATE] + rs.py_status[PY_TORN])
		pr_info("Python walk: %llu ok, %llu without a thread state, %llu read errors, "
			"%llu invalid thread states, %llu caught entering the eval loop, %llu not "
			"configured yet",
			(unsigned long long)rs.py_status[PY_OK],
			(unsigned long long)rs.py_status[PY_NO_TSTATE],
			(unsigned long long)rs.py_status[PY_READ_ERROR],
			(unsigned long long)rs.py_status[PY_BAD_TSTATE],
			(unsigned long long)rs.py_status[PY_TORN],
			(unsigned long long)rs.py_status[PY_NONE]);
	if (rs.unresolved)
		fprintf(stderr,
			"probing: %llu samples of processes that exited before their "
			"memory maps could be read have no stack\n",
			(unsigned long long)rs.unresolved);
cleanup:
	evqueue__free(q);
	if (release >= 0)
		close(release);
	if (errfd >= 0)
		close(errfd);
	if (child > 0) {
		/* The command we started does not outlive the recording. */
		if (!waitpid(child, NULL, WNOHANG)) {
			kill(child, SIGTERM);
			waitpid(child, NULL, 0);
		}
	}
	recorder__free(rec);
	sampling__free(smp);
	/* A recording that never started is not left behind as an empty file. */
	if (!started)
		store__discard(st);
	else if (store__close(st) && ret == EXIT_OK)
		ret = EXIT_FAIL; /* the reason and where the data is were printed */
	free(pids);
	return ret;
}

COMMAND(record, cmd_record, "sample native and Python stacks of processes into a recording", 10);
