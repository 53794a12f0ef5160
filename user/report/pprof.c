// SPDX-License-Identifier: MIT
/* Recordings as pprof profiles: profile.proto messages, gzip-compressed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/bmap.h"
#include "base/escape.h"
#include "report/pprof.h"
#include "bpf/waitclass.h"
#include "report/protobuf.h"

/* Profile message field numbers (profile.proto). */
enum {
	PROFILE_SAMPLE_TYPE = 1,
	PROFILE_SAMPLE = 2,
	PROFILE_MAPPING = 3,
	PROFILE_LOCATION = 4,
	PROFILE_FUNCTION = 5,
	PROFILE_STRING_TABLE = 6,
	PROFILE_TIME_NANOS = 9,
	PROFILE_DURATION_NANOS = 10,
	PROFILE_PERIOD_TYPE = 11,
	PROFILE_PERIOD = 12,
	PROFILE_COMMENT = 13,
	VALUE_TYPE_TYPE = 1,
	VALUE_TYPE_UNIT = 2,
	SAMPLE_LOCATION_ID = 1,
	SAMPLE_VALUE = 2,
	SAMPLE_LABEL = 3,
	LABEL_KEY = 1,
	LABEL_STR = 2,
	LABEL_NUM = 3,
	MAPPING_ID = 1,
	MAPPING_FILENAME = 5,
	MAPPING_HAS_FUNCTIONS = 7,
	MAPPING_HAS_FILENAMES = 8,
	MAPPING_HAS_LINE_NUMBERS = 9,
	LOCATION_ID = 1,
	LOCATION_MAPPING_ID = 2,
	LOCATION_LINE = 4,
	LINE_FUNCTION_ID = 1,
	LINE_LINE = 2,
	FUNCTION_ID = 1,
	FUNCTION_NAME = 2,
	FUNCTION_FILENAME = 4,
};

struct enc {
	struct strbuf out;     /* the Profile message, without its string table */
	struct strbuf strings; /* the string table, encoded (field 6 entries) */
	struct bmap *string_ids;
	struct bmap *function_ids;
	struct bmap *mapping_ids;
	struct strbuf msg, sub, key; /* scratch */
};

/*
 * The string table index of @s (interned; "" is index 0). Every string is display text
 * (names, files, thread names), stored as text_escape (escape.h) shows it: valid UTF-8, as
 * profile.proto's string fields must be, and inert in pprof's text reports.
 */
static int str_id(struct enc *e, const char *s, uint64_t *id)
{
	struct strbuf shown = {0};
	uint64_t *slot;
	int inserted, err;

	err = text_escape(&shown, s ? s : "", s ? strlen(s) : 0, 0);
	if (err)
		return err;
	slot = bmap__upsert(e->string_ids, shown.buf, shown.len, bmap__size(e->string_ids),
			    &inserted);
	if (!slot)
		err = -ENOMEM;
	else
		*id = *slot;
	if (!err && inserted)
		err = pb_bytes(&e->strings, PROFILE_STRING_TABLE, shown.buf, shown.len);
	sb_free(&shown);
	return err;
}

/* A ValueType{type, unit} field. */
static int value_type(struct enc *e, uint32_t field, const char *type, const char *unit)
{
	uint64_t t, u;
	int err;

	sb_reset(&e->msg);
	err = str_id(e, type, &t);
	if (!err)
		err = str_id(e, unit, &u);
	if (!err)
		err = pb_uint(&e->msg, VALUE_TYPE_TYPE, t);
	if (!err)
		err = pb_uint(&e->msg, VALUE_TYPE_UNIT, u);
	if (!err)
		err = pb_bytes(&e->out, field, e->msg.buf, e->msg.len);
	return err;
}

/*
 * The Function id of frame @f, adding the Function message on first use. No system_name:
 * frames are symbolized and demangled already, and pprof rewrites a name equal to its
 * system name as if it were C++ ("<module>" would lose everything between '<' and '>').
 */
static int function_id(struct enc *e, const struct frame *f, uint64_t *id)
{
	const char *name = f->kind == FRAME_PYTHON && f->qualname ? f->qualname : f->func;
	uint64_t key[2], *slot;
	int inserted, err;

	err = str_id(e, name, &key[0]);
	if (!err)
		err = str_id(e, f->file, &key[1]);
	if (err)
		return err;
	slot = bmap__upsert(e->function_ids, key, sizeof(key), bmap__size(e->function_ids) + 1,
			    &inserted);
	if (!slot)
		return -ENOMEM;
	*id = *slot;
	if (!inserted)
		return 0;
	sb_reset(&e->msg);
	err = pb_uint(&e->msg, FUNCTION_ID, *id);
	if (!err)
		err = pb_uint(&e->msg, FUNCTION_NAME, key[0]);
	if (!err)
		err = pb_uint(&e->msg, FUNCTION_FILENAME, key[1]);
	if (!err)
		err = pb_bytes(&e->out, PROFILE_FUNCTION, e->msg.buf, e->msg.len);
	return err;
}

/* The Mapping id of the ELF file @path, adding the Mapping on first use. */
static int mapping_of_file(struct enc *e, const char *path, uint64_t *id)
{
	uint64_t file, *slot;
	int inserted, err;

	slot = bmap__upsert(e->mapping_ids, path, strlen(path), bmap__size(e->mapping_ids) + 1,
			    &inserted);
	if (!slot)
		return -ENOMEM;
	*id = *slot;
	if (!inserted)
		return 0;
	err = str_id(e, path, &file);
	sb_reset(&e->msg);
	if (!err)
		err = pb_uint(&e->msg, MAPPING_ID, *id);
	if (!err)
		err = pb_uint(&e->msg, MAPPING_FILENAME, file);
	/* Symbolized already: tell pprof not to look for symbols by address. */
	if (!err)
		err = pb_uint(&e->msg, MAPPING_HAS_FUNCTIONS, 1);
	if (!err)
		err = pb_uint(&e->msg, MAPPING_HAS_FILENAMES, 1);
	if (!err)
		err = pb_uint(&e->msg, MAPPING_HAS_LINE_NUMBERS, 1);
	if (!err)
		err = pb_bytes(&e->out, PROFILE_MAPPING, e->msg.buf, e->msg.len);
	return err;
}

/* The Mapping id of a native/kernel frame's module (0 for none). */
static int mapping_id(struct enc *e, const struct frame *f, uint64_t *id)
{
	*id = 0;
	if (f->kind == FRAME_PYTHON || !f->module)
		return 0;
	return mapping_of_file(e, f->module, id);
}

/* The index in p->processes of @pid, or -1 (processes are sorted by pid). */
static long process_index(const struct profile *p, pid_t pid)
{
	size_t lo = 0, hi = p->nprocesses, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (p->processes[mid].pid == pid)
			return mid;
		if (p->processes[mid].pid < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/*
 * The mappings of the executables of the processes with samples, the busiest process's
 * first, before any library's: pprof takes the first mapping for the profile's main binary
 * (the "File:" of its reports) and would otherwise name whatever library the first frame
 * came from, such as libc.so.6.
 */
static int executable_mappings(struct enc *e, const struct profile *p)
{
	uint64_t *totals, id, t;
	size_t *order, i, j, n = p->nprocesses;
	long k;
	int err = 0;

	if (!n)
		return 0;
	totals = calloc(n, sizeof(*totals));
	order = calloc(n, sizeof(*order));
	if (!totals || !order) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < p->nsamples; i++) {
		k = process_index(p, p->samples[i].pid);
		if (k >= 0)
			totals[k] += p->samples[i].count;
	}
	/* Insertion sort by samples, most first (ties: lower pid first); few processes. */
	for (i = 0; i < n; i++) {
		t = totals[i];
		for (j = i; j > 0 && totals[order[j - 1]] < t; j--)
			order[j] = order[j - 1];
		order[j] = i;
	}
	for (i = 0; !err && i < n; i++)
		if (totals[order[i]] && p->processes[order[i]].exe)
			err = mapping_of_file(e, p->processes[order[i]].exe, &id);
cleanup:
	free(totals);
	free(order);
	return err;
}

/* Location i + 1 for frame i. */
static int location(struct enc *e, const struct profile *p, size_t i)
{
	const struct frame *f = &p->frames[i];
	uint64_t fid, mid;
	int err;

	err = function_id(e, f, &fid);
	if (!err)
		err = mapping_id(e, f, &mid);
	if (err)
		return err;
	sb_reset(&e->sub);
	err = pb_uint(&e->sub, LINE_FUNCTION_ID, fid);
	if (!err && f->line > 0)
		err = pb_uint(&e->sub, LINE_LINE, f->line);
	sb_reset(&e->msg);
	if (!err)
		err = pb_uint(&e->msg, LOCATION_ID, i + 1);
	if (!err)
		err = pb_uint(&e->msg, LOCATION_MAPPING_ID, mid);
	if (!err)
		err = pb_bytes(&e->msg, LOCATION_LINE, e->sub.buf, e->sub.len);
	if (!err)
		err = pb_bytes(&e->out, PROFILE_LOCATION, e->msg.buf, e->msg.len);
	return err;
}

/* A Label{key, num} or Label{key, str} into e->sub. */
static int label(struct enc *e, const char *key, const char *str, int64_t num)
{
	struct strbuf l = {0};
	uint64_t k, s;
	int err;

	err = str_id(e, key, &k);
	if (!err)
		err = pb_uint(&l, LABEL_KEY, k);
	if (!err && str) {
		err = str_id(e, str, &s);
		if (!err)
			err = pb_uint(&l, LABEL_STR, s);
	} else if (!err) {
		err = pb_uint(&l, LABEL_NUM, (uint64_t)num);
	}
	if (!err)
		err = pb_bytes(&e->msg, SAMPLE_LABEL, l.buf, l.len);
	sb_free(&l);
	return err;
}

static int sample(struct enc *e, const struct profile *p, const struct profile_sample *s,
		  uint64_t period, uint64_t *locs)
{
	const struct profile_stack *st = &p->stacks[s->stack];
	const char *thread = profile__thread_name(p, s->pid, s->tid);
	const struct profile_process *pr = profile__process(p, s->pid);
	/* Wall-clock (off-CPU recordings): the time the samples stand for, on the CPU or off. */
	uint64_t values[2] = {s->count, p->wall ? s->ns : s->count * period};
	long state_frame = profile__state_frame(p, s->state);
	uint32_t d, n = 0;
	int err;

	/* Leaf first, as the recording stores them; an off-CPU state's pseudo-frame before. */
	if (state_frame >= 0)
		locs[n++] = (uint64_t)state_frame + 1;
	for (d = 0; d < st->n; d++)
		locs[n++] = p->refs[st->first + d] + 1;
	sb_reset(&e->msg);
	err = pb_packed(&e->msg, SAMPLE_LOCATION_ID, locs, n);
	if (!err)
		err = pb_packed(&e->msg, SAMPLE_VALUE, values, 2);
	if (!err)
		err = label(e, "pid", NULL, s->pid);
	if (!err)
		err = label(e, "tid", NULL, s->tid);
	if (!err && pr && pr->rank >= 0)
		err = label(e, "rank", NULL, pr->rank);
	if (!err && thread)
		err = label(e, "thread", thread, 0);
	if (!err && p->wall)
		err = label(e, "state", wait_state_name(s->state), 0);
	if (!err)
		err = pb_bytes(&e->out, PROFILE_SAMPLE, e->msg.buf, e->msg.len);
	return err;
}

int pprof__encode(const struct profile *p, double frequency, struct strbuf *out)
{
	struct enc e = {0};
	uint64_t period = hz_period_ns(frequency >= 1 ? (unsigned int)frequency
						      : PROBING_DEFAULT_HZ),
		 *locs = NULL, id, maxn = 1;
	size_t i;
	int err = 0;

	e.string_ids = bmap__new();
	e.function_ids = bmap__new();
	e.mapping_ids = bmap__new();
	for (i = 0; i < p->nstacks; i++)
		maxn = p->stacks[i].n > maxn ? p->stacks[i].n : maxn;
	locs = malloc((maxn + 1) * sizeof(*locs)); /* + an off-CPU state's pseudo-frame */
	if (!e.string_ids || !e.function_ids || !e.mapping_ids || !locs) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = str_id(&e, "", &id); /* string_table[0] must be "" */
	if (!err)
		err = value_type(&e, PROFILE_SAMPLE_TYPE, "samples", "count");
	if (!err)
		err = value_type(&e, PROFILE_SAMPLE_TYPE, p->wall ? "wall" : "cpu", "nanoseconds");
	if (!err)
		err = executable_mappings(&e, p);
	for (i = 0; !err && i < p->nframes; i++)
		err = location(&e, p, i);
	for (i = 0; !err && i < p->nsamples; i++)
		err = sample(&e, p, &p->samples[i], period, locs);
	if (!err)
		err = pb_uint(&e.out, PROFILE_TIME_NANOS, (uint64_t)(p->start * 1e9));
	if (!err)
		err = pb_uint(&e.out, PROFILE_DURATION_NANOS, (uint64_t)(p->duration * 1e9));
	if (!err)
		err = value_type(&e, PROFILE_PERIOD_TYPE, p->wall ? "wall" : "cpu", "nanoseconds");
	if (!err)
		err = pb_uint(&e.out, PROFILE_PERIOD, period);
	if (!err)
		err = str_id(&e, "recorded by probing", &id);
	if (!err)
		err = pb_uint(&e.out, PROFILE_COMMENT, id);
	/* Fields may come in any order: the string table goes last, once complete. */
	if (!err)
		err = sb_append(out, e.out.buf, e.out.len);
	if (!err)
		err = sb_append(out, e.strings.buf, e.strings.len);
cleanup:
	free(locs);
	bmap__free(e.string_ids);
	bmap__free(e.function_ids);
	bmap__free(e.mapping_ids);
	sb_free(&e.out);
	sb_free(&e.strings);
	sb_free(&e.msg);
	sb_free(&e.sub);
	sb_free(&e.key);
	return err;
}

int pprof__gzip(FILE *f, const void *data, size_t n)
{
	unsigned char buf[65536];
	z_stream z;
	int rc, err = 0;

	memset(&z, 0, sizeof(z));
	/* windowBits 15 + 16: a gzip header and trailer instead of zlib's. */
	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
	    Z_OK)
		return -ENOMEM;
	z.next_in = (unsigned char *)data;
	z.avail_in = n; /* profiles are far below 4 GiB */
	do {
		z.next_out = buf;
		z.avail_out = sizeof(buf);
		rc = deflate(&z, Z_FINISH);
		if (rc == Z_STREAM_ERROR) {
			err = -EIO;
			break;
		}
		if (fwrite(buf, 1, sizeof(buf) - z.avail_out, f) != sizeof(buf) - z.avail_out) {
			err = errno ? -errno : -EIO;
			break;
		}
	} while (rc != Z_STREAM_END);
	deflateEnd(&z);
	return err;
}
