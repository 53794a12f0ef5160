// SPDX-License-Identifier: MIT
/* steps: a process's step pace from readings of its step count once a second, with known
 * step times: steady, slow, just begun, and the last move before a hang. */
#include <math.h>

#include "watch/steps.h"
#include "test.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

/* Steps of @step_s seconds from @t0 to @t1 (the process stops there), read every second from
 * @t0 + @phase: the last reading's time. */
static double read_steps(struct step_pace *p, double step_s, double t0, double t1, double phase,
			 double until)
{
	double t;

	for (t = t0 + phase; t <= until; t += 1.0) {
		double active = (t < t1 ? t : t1) - t0;

		step_pace__read(p, (int64_t)(active / step_s), t);
	}
	return t - 1.0;
}

TEST(steady_steps_read_at_their_pace)
{
	struct step_pace p = {0};

	CHECK(NEAR(step_pace__longest(&p), 0));
	/* 20 ms steps (50 a second): each reading 50 steps on. */
	read_steps(&p, 0.02, 0, 1e9, 0.5, 20);
	CHECK(step_pace__longest(&p) > 0.019 && step_pace__longest(&p) < 0.021);
}

TEST(the_last_move_before_a_hang_does_not_count)
{
	struct step_pace p = {0};

	/* 15 ms steps until 10.985 s, then none (a hang), read at 0.97 s, 1.97 s...: the
	 * readings at 10.97 and 11.97 see one step over a second, seemingly a 1 s step. It is
	 * pending, and the pace stays the steady one. */
	read_steps(&p, 0.015, 0, 10.985, 0.97, 30);
	CHECK(step_pace__longest(&p) < 0.016);
	CHECK(NEAR(p.pending, 1.0));
	/* It moves again: the pending move counts then (a real slow step, or a pause). */
	CHECK(step_pace__read(&p, p.step + 50, 31.0));
	CHECK(NEAR(step_pace__longest(&p), 1.0));
}

TEST(slow_steps_longer_than_the_reading_interval)
{
	struct step_pace p = {0};

	/* 3.5 s steps read every second: moves of one step 3 or 4 s apart. */
	read_steps(&p, 3.5, 0, 1e9, 0.25, 60);
	CHECK(step_pace__longest(&p) >= 3.0 && step_pace__longest(&p) <= 4.0);
}

TEST(one_move_only_is_all_there_is)
{
	struct step_pace p = {0};

	CHECK(step_pace__read(&p, 7, 100.0)); /* the first reading */
	CHECK(NEAR(step_pace__longest(&p), 0));
	CHECK(!step_pace__read(&p, 7, 101.0));
	CHECK(!step_pace__read(&p, 7, 102.0));
	CHECK(step_pace__read(&p, 8, 103.0)); /* 3 s since 7 was first read */
	CHECK(NEAR(step_pace__longest(&p), 3.0));
	CHECK(NEAR(p.seen, 103.0));
}

TEST(a_new_count_is_judged_from_now)
{
	struct step_pace p = {0};

	read_steps(&p, 0.1, 0, 1e9, 0.5, 10);
	CHECK(step_pace__longest(&p) > 0.09 && step_pace__longest(&p) < 0.11);
	/* The hooks put in again: the count starts over; its first reading is a move, no gap. */
	CHECK(step_pace__read(&p, 0, 50.0));
	CHECK(p.step == 0 && NEAR(p.seen, 50.0) && NEAR(p.pending, 0));
	CHECK(step_pace__longest(&p) > 0.09 && step_pace__longest(&p) < 0.11);
}

TEST_MAIN()
