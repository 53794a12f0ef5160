// SPDX-License-Identifier: MIT
/* libwlplugin.so: loaded with dlopen() part-way through the dlopen workload. */
volatile unsigned long wlplugin_sink;

__attribute__((noinline)) void plugin_work(double seconds, double (*now)(void))
{
	double end = now() + seconds;

	while (now() < end)
		for (int i = 0; i < 10000; i++)
			wlplugin_sink += i * 11;
}
