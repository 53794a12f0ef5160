// SPDX-License-Identifier: MIT
/* Recordings as speedscope JSON. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/escape.h"
#include "report/framename.h"
#include "report/speedscope.h"
#include "base/util.h"

/* Write @sb out and empty it when it grew large: samples can run to many megabytes. */
static int drain(struct strbuf *sb, FILE *f, bool force)
{
	if (!force && sb->len < (1 << 20))
		return 0;
	if (sb->len && fwrite(sb->buf, 1, sb->len, f) != sb->len)
		return -EIO;
	sb_reset(sb);
	return 0;
}

static int frames_json(const struct profile *p, struct strbuf *sb)
{
	struct strbuf name = {0};
	size_t i;
	int err = sb_puts(sb, "\"shared\":{\"frames\":[");

	for (i = 0; !err && i < p->nframes; i++) {
		const struct frame *f = &p->frames[i];

		sb_reset(&name);
		err = frame_name(&name, f);
		if (!err)
			err = sb_puts(sb, i ? ",\n{\"name\":" : "\n{\"name\":");
		if (!err)
			err = json_string(sb, name.buf, name.len);
		if (!err && f->file) {
			/* Display text like the name (escape.h), so the file shows as it does there. */
			sb_reset(&name);
			err = sb_puts(sb, ",\"file\":");
			err = err ?: text_escape(&name, f->file, strlen(f->file), 0);
			err = err ?: json_string(sb, name.buf, name.len);
		}
		if (!err && f->line > 0)
			err = sb_printf(sb, ",\"line\":%d", f->line);
		if (!err)
			err = sb_puts(sb, "}");
	}
	if (!err)
		err = sb_puts(sb, "]},\n");
	sb_free(&name);
	return err;
}

/* What a sample weighs: its count, or in a wall-clock profile (off-CPU recordings) its ns. */
static uint64_t weight(const struct profile *p, const struct profile_sample *s)
{
	return p->wall ? s->ns : s->count;
}

/* One profile: the samples [first, end) of one thread. */
static int thread_json(const struct profile *p, size_t first, size_t end, struct strbuf *sb,
		       FILE *f)
{
	const struct profile_sample *s0 = &p->samples[first];
	const char *tname = profile__thread_name(p, s0->pid, s0->tid) ?: "thread";
	const struct profile_process *pr = profile__process(p, s0->pid);
	uint64_t total = 0;
	size_t i;
	uint32_t d;
	int err;

	for (i = first; i < end; i++)
		total += weight(p, &p->samples[i]);
	err = sb_puts(sb, "{\"type\":\"sampled\",\"name\":");
	if (!err) {
		struct strbuf name = {0};

		err = text_escape(&name, tname, strlen(tname), 0);
		/* "MainThread (rank 3, pid 1234, tid 1240)": which rank of a job it is. */
		if (!err && pr && pr->rank >= 0)
			err = sb_printf(&name, " (rank %d, pid %d, tid %d)", pr->rank, (int)s0->pid,
					(int)s0->tid);
		else if (!err)
			err = sb_printf(&name, " (pid %d, tid %d)", (int)s0->pid, (int)s0->tid);
		if (!err)
			err = json_string(sb, name.buf, name.len);
		sb_free(&name);
	}
	if (!err)
		err = sb_printf(sb,
				",\"unit\":\"%s\",\"startValue\":0,\"endValue\":%llu,"
				"\"samples\":[",
				p->wall ? "nanoseconds" : "none", (unsigned long long)total);
	for (i = first; !err && i < end; i++) {
		const struct profile_stack *st = &p->stacks[p->samples[i].stack];
		long state_frame = profile__state_frame(p, p->samples[i].state);

		err = sb_puts(sb, i > first ? ",\n[" : "\n[");
		/* speedscope wants the root first; the recording has the leaf at depth 0. */
		for (d = 0; !err && d < st->n; d++)
			err = sb_printf(sb, d ? ",%u" : "%u", p->refs[st->first + st->n - 1 - d]);
		/* Off-CPU: the state's pseudo-frame on top ("[off-CPU: lock]"). */
		if (!err && state_frame >= 0)
			err = sb_printf(sb, st->n ? ",%ld" : "%ld", state_frame);
		if (!err)
			err = sb_puts(sb, "]");
		if (!err)
			err = drain(sb, f, false);
	}
	if (!err)
		err = sb_puts(sb, "],\n\"weights\":[");
	for (i = first; !err && i < end; i++) {
		err = sb_printf(sb, i > first ? ",%llu" : "%llu",
				(unsigned long long)weight(p, &p->samples[i]));
		if (!err)
			err = drain(sb, f, false);
	}
	if (!err)
		err = sb_puts(sb, "]}");
	return err;
}

int speedscope__write(const struct profile *p, const char *name, FILE *f)
{
	struct strbuf sb = {0};
	size_t i, start, nthreads = 0, busiest = 0;
	uint64_t best = 0, sum = 0;
	int err;

	/* Samples are sorted by pid, tid: each thread is one run. Find the busiest. */
	for (i = 0, start = 0; i <= p->nsamples; i++) {
		if (i < p->nsamples && i > start && p->samples[i].pid == p->samples[start].pid &&
		    p->samples[i].tid == p->samples[start].tid) {
			sum += p->samples[i].count;
			continue;
		}
		if (i > start) {
			if (sum > best) {
				best = sum;
				busiest = nthreads;
			}
			nthreads++;
		}
		start = i;
		sum = i < p->nsamples ? p->samples[i].count : 0;
	}
	err = sb_puts(&sb, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\n"
			   "\"exporter\":\"probing\",\"name\":");
	if (!err)
		err = json_string(&sb, name, strlen(name));
	if (!err)
		err = sb_printf(&sb, ",\"activeProfileIndex\":%zu,\n", busiest);
	if (!err)
		err = frames_json(p, &sb);
	if (!err)
		err = sb_puts(&sb, "\"profiles\":[");
	for (i = 0, start = 0; !err && i <= p->nsamples; i++) {
		if (i < p->nsamples && p->samples[i].pid == p->samples[start].pid &&
		    p->samples[i].tid == p->samples[start].tid)
			continue;
		if (i > start) {
			if (start)
				err = sb_puts(&sb, ",\n");
			if (!err)
				err = thread_json(p, start, i, &sb, f);
		}
		start = i;
	}
	if (!err)
		err = sb_puts(&sb, "]}\n");
	if (!err)
		err = drain(&sb, f, true);
	sb_free(&sb);
	return err;
}
