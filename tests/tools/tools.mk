# Test tools: programs the tests and benchmarks use to make their inputs.
#   build/tests/tools/folded2db   folded stacks -> a recording, through the store API

TOOLS_BINS := $(BUILD)/tests/tools/folded2db

$(BUILD)/tests/tools/%: $(BUILD)/obj/tests/tools/%.o $(LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

.PHONY: tools
tools: $(TOOLS_BINS)

TEST_TARGETS += $(TOOLS_BINS)
# Keep the objects (they would be removed as intermediates, and rebuilt every time).
.SECONDARY: $(patsubst $(BUILD)/tests/tools/%,$(BUILD)/obj/tests/tools/%.o,$(TOOLS_BINS))
