// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "python/pyaiolayout.h"
#include "test.h"

/* The .AsyncioDebug block of Debian unstable's _asyncio.cpython-314-x86_64-linux-gnu.so
 * (3.14.10), as its file holds it. */
static const uint64_t block_314[13] = {168,    136,   96,  108, 109, 128, 152, /* TaskObj */
				       225864, 10880,			       /* interpreter */
				       936,    864,   872, 880};	       /* thread */

static int layout(const uint64_t *b, size_t size, struct py_aio_layout *lay)
{
	char why[160];

	return pyaio__from_block(b, size, lay, why, sizeof(why));
}

TEST(block_of_314_gives_its_task_layout)
{
	struct py_aio_layout lay;

	CHECK_EQ(layout(block_314, sizeof(block_314), &lay), 0);
	CHECK(lay.lists);
	CHECK_EQ(lay.fut_loop, 16);
	CHECK_EQ(lay.fut_state, 104); /* after fut_awaited_by (96) */
	CHECK_EQ(lay.task_fut_waiter, 120);
	CHECK_EQ(lay.task_coro, 128);
	CHECK_EQ(lay.task_name, 136);
	CHECK_EQ(lay.task_node, 152);
	CHECK_EQ(lay.task_is_task, 108);
	CHECK_EQ(lay.is_tasks_head, 10880);
	CHECK_EQ(lay.ts_tasks_head, 880);
	CHECK_EQ(lay.ts_running_loop, 864);
	CHECK_EQ(lay.ts_running_task, 872);
}

TEST(hostile_or_unknown_blocks_are_refused)
{
	struct py_aio_layout lay;
	uint64_t b[13];
	/* Each: which word to change, and to what. */
	static const struct {
		int word;
		uint64_t v;
	} bad[] = {
		{0, 0},		      /* a TaskObj of size 0 */
		{0, 1ull << 40},      /* absurdly large */
		{1, 1ull << 63},      /* task_name far outside */
		{6, 160},	      /* task_node's 16 bytes past the end */
		{5, 8},		      /* task_coro inside the object header */
		{1, 144},	      /* task_name not right after task_coro: not 3.14's Task */
		{3, 112},	      /* fut_is_task not right after fut_state */
		{8, 225860},	      /* the interpreter's list head past its struct */
		{9, 1ull << 20},      /* a thread state of a megabyte */
		{12, 936},	      /* the thread's list head at its struct's end */
		{10, UINT64_MAX - 4}, /* overflow-prone offset */
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memcpy(b, block_314, sizeof(b));
		b[bad[i].word] = bad[i].v;
		CHECK_EQ(layout(b, sizeof(b), &lay), -ENOTSUP);
	}
	CHECK_EQ(layout(block_314, sizeof(block_314) - 8, &lay), -ENOTSUP); /* short */
}

TEST_MAIN()
