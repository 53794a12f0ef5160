# The flame graph's style and script, real files embedded in the SVG writer
# (user/report/flamegraph.c) as the strings probing_flamegraph_css and probing_flamegraph_js.
FLAMEGRAPH_ASSETS := user/report/flamegraph.css user/report/flamegraph.js
FLAMEGRAPH_ASSETS_O := $(BUILD)/obj/user/report/flamegraph_assets.o

$(eval $(call embed,$(FLAMEGRAPH_ASSETS_O),probing_,$(FLAMEGRAPH_ASSETS)))

# Archived with the modules, through $^ of the library's rule.
$(LIB): $(FLAMEGRAPH_ASSETS_O)
