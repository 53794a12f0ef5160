// SPDX-License-Identifier: MIT
/* pyaiolayout: the _asyncio module's layout for the task reader (pyaiolayout.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/procmaps.h"
#include "python/pyaiolayout.h"
#include "python/pyelf.h"
#include "python/pyproc_int.h"

#define AIO_SECTION   ".AsyncioDebug"
#define TASK_SIZE_MAX 4096u	 /* sizeof(TaskObj): 168 in 3.14 and 3.15 */
#define TSTATE_MAX    (1u << 16) /* sizeof(_PyThreadStateImpl): 936 (3.14), 1104 (3.15) */

/*
 * struct _Py_AsyncioModuleDebugOffsets of 3.14 and 3.15 (Modules/_asynciomodule.c), the same
 * in both: three groups, each led by the size of the struct its offsets are in.
 */
struct aio_debug {
	uint64_t task_size, task_name, task_awaited_by, task_is_task, task_awaited_by_is_set,
		task_coro, task_node;
	uint64_t interp_size, interp_tasks_head;
	uint64_t thread_size, thread_running_loop, thread_running_task, thread_tasks_head;
};

/* Whether @off + @width bytes lie in a struct of @size bytes, past the object header. */
static bool inside(uint64_t off, uint64_t width, uint64_t size)
{
	return off >= 16 && off <= size && width <= size - off;
}

/*
 * @d checked, then turned into @lay. Besides the bounds, the block must describe 3.14's and
 * 3.15's TaskObj, where what it does not name sits next to what it does: fut_state (an int)
 * right after fut_awaited_by and before fut_is_task, task_fut_waiter right before task_coro
 * and task_name right after it.
 */
static int from_debug(const struct aio_debug *d, struct py_aio_layout *lay, char *why, size_t len)
{
	if (!d->task_size || d->task_size > TASK_SIZE_MAX ||
	    !inside(d->task_name, 8, d->task_size) ||
	    !inside(d->task_awaited_by, 8, d->task_size) ||
	    !inside(d->task_is_task, 1, d->task_size) || !inside(d->task_coro, 8, d->task_size) ||
	    !inside(d->task_node, 16, d->task_size) || !d->interp_size ||
	    d->interp_size > PY_DBG_STRUCT_MAX ||
	    !inside(d->interp_tasks_head, 16, d->interp_size) || !d->thread_size ||
	    d->thread_size > TSTATE_MAX || !inside(d->thread_running_loop, 8, d->thread_size) ||
	    !inside(d->thread_running_task, 8, d->thread_size) ||
	    !inside(d->thread_tasks_head, 16, d->thread_size)) {
		snprintf(why, len, "its " AIO_SECTION " block has an offset or size out of bounds");
		return -ENOTSUP;
	}
	if (d->task_is_task != d->task_awaited_by + 12 || d->task_name != d->task_coro + 8 ||
	    d->task_coro < 24) {
		snprintf(why, len,
			 "its " AIO_SECTION " block describes a Task laid out unlike 3.14's");
		return -ENOTSUP;
	}
	memset(lay, 0, sizeof(*lay));
	lay->fut_loop = 16; /* the first member after PyObject_HEAD */
	lay->fut_state = (uint32_t)d->task_awaited_by + 8;
	lay->task_fut_waiter = (uint32_t)d->task_coro - 8;
	lay->task_coro = (uint32_t)d->task_coro;
	lay->task_name = (uint32_t)d->task_name;
	lay->lists = true;
	lay->task_node = (uint32_t)d->task_node;
	lay->task_is_task = (uint32_t)d->task_is_task;
	lay->is_tasks_head = (uint32_t)d->interp_tasks_head;
	lay->ts_tasks_head = (uint32_t)d->thread_tasks_head;
	lay->ts_running_loop = (uint32_t)d->thread_running_loop;
	lay->ts_running_task = (uint32_t)d->thread_running_task;
	return 0;
}

int pyaio__from_block(const void *block, size_t size, struct py_aio_layout *lay, char *why,
		      size_t len)
{
	struct aio_debug d;

	if (size < sizeof(d)) {
		snprintf(why, len, "its " AIO_SECTION " block is %zu bytes, not %zu", size,
			 sizeof(d));
		return -ENOTSUP;
	}
	memcpy(&d, block, sizeof(d));
	return from_debug(&d, lay, why, len);
}

/* Whether the file of @m may hold this interpreter's _asyncio: the extension of the same
 * minor ("_asyncio.cpython-314-x86_64-linux-gnu.so"), or the interpreter itself. */
static bool may_hold_asyncio(const struct pyproc *pp, const struct procmap *m)
{
	const char *base = procmaps__basename(m);
	char tag[32];

	if (pp->elf_path && !strcmp(m->path, pp->elf_path))
		return true;
	snprintf(tag, sizeof(tag), "cpython-3%u", PY_VER_MINOR(pp->version));
	return !strncmp(base, "_asyncio", 8) && strstr(base, tag);
}

/* The .AsyncioDebug block of the process's _asyncio into @d (*@size bytes of it were there):
 * 0 or -ENOENT. */
static int find_debug(struct pyproc *pp, struct aio_debug *d, uint64_t *size)
{
	struct procmaps pm;
	uint64_t addr;
	size_t i, j;
	int err = -ENOENT;

	memset(d, 0, sizeof(*d));
	if (procmaps__read(pp->pid, &pm))
		return -ENOENT;
	for (i = 0; i < pm.nr && err; i++) {
		const struct procmap *m = &pm.maps[i];
		struct pyelf *e;
		bool seen = false;

		if (m->path[0] != '/' || !may_hold_asyncio(pp, m))
			continue;
		for (j = 0; j < i && !seen; j++)
			seen = !strcmp(pm.maps[j].path, m->path);
		if (seen)
			continue; /* the first mapping of each file stands for it */
		e = pyelf__open(pp->pid, m);
		if (!e)
			continue;
		if (!pyelf__section(e, AIO_SECTION, &addr, size) &&
		    !pyelf__read(e, addr, d, *size < sizeof(*d) ? *size : sizeof(*d)))
			err = 0;
		pyelf__free(e);
	}
	procmaps__release(&pm);
	return err;
}

int pyaio__layout(struct pyproc *pp, struct py_aio_layout *lay, char *why, size_t len)
{
	const struct py_offsets *o = &pp->off;
	struct aio_debug d;
	uint64_t size = 0;

	if (pp->version < PY_VER(3, 14)) {
		if (o->task_coro == PYO_NONE || o->fut_loop == PYO_NONE) {
			snprintf(why, len, "no offsets of the _asyncio module for Python %s",
				 pp->version_str);
			return -ENOTSUP;
		}
		memset(lay, 0, sizeof(*lay));
		lay->fut_loop = o->fut_loop;
		lay->fut_state = o->fut_state;
		lay->task_fut_waiter = o->task_fut_waiter;
		lay->task_coro = o->task_coro;
		lay->task_name = o->task_name;
		return 0;
	}
	if (o->if_stackpointer == PYO_NONE || o->gen_iframe == PYO_NONE) {
		snprintf(why, len, "no coroutine frame offsets for Python %s", pp->version_str);
		return -ENOTSUP;
	}
	if (find_debug(pp, &d, &size)) {
		snprintf(why, len,
			 "no " AIO_SECTION " block in its _asyncio module (loaded from a file "
			 "probing could not open, or built without it)");
		return -ENOTSUP;
	}
	return pyaio__from_block(&d, size, lay, why, len);
}
