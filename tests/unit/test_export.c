// SPDX-License-Identifier: MIT
/* The table of export formats (report/export.h): what 'probing export' relies on of each row. */
#include <string.h>

#include "report/export.h"
#include "test.h"

TEST(every_row_is_complete_and_found_by_name)
{
	const struct export_format *x, *y;
	size_t n = 0;

	for (x = export_formats; x->name; x++, n++) {
		/* Exactly one writer: the command picks its source (samples or timeline) by it. */
		CHECK(!x->write_samples != !x->write_trace);
		/* --help prints the paragraph line by line after the name. */
		REQUIRE(x->help && *x->help);
		CHECK(x->help[strlen(x->help) - 1] == '\n');
		CHECK(strlen(x->name) <= 10); /* the name column of --help */
		CHECK(!x->write_trace || (!x->load_flags && !x->binary));
		CHECK(export_format__find(x->name) == x);
		for (y = export_formats; y < x; y++)
			CHECK(strcmp(x->name, y->name));
	}
	CHECK(n >= 4);
	CHECK(export_format__find("pprof") && export_format__find("pprof")->binary);
	CHECK(export_format__find("chrome") && export_format__find("chrome")->write_trace);
	CHECK(!export_format__find("flame"));
	CHECK(!export_format__find(""));
}

TEST_MAIN()
