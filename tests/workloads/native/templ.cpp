// SPDX-License-Identifier: MIT
/*
 * Ground truth: the time is spent in Worker<int>::spin(int) and Worker<double>::spin(int)
 * (a C++ class template in a namespace), called from main.
 */
#include <cstdlib>
#include <ctime>

namespace wl
{
template <typename T> struct Worker {
	volatile T acc = 0;
	__attribute__((noinline)) void spin(int n)
	{
		for (int i = 0; i < n; i++)
			acc = acc + static_cast<T>(i % 7);
	}
};
} // namespace wl

static double now()
{
	timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double end = now() + (argc > 1 ? atof(argv[1]) : 3);
	wl::Worker<int> wi;
	wl::Worker<double> wd;

	while (now() < end) {
		wi.spin(100000);
		wd.spin(100000);
	}
	return 0;
}
