# Test tools linked with libprobing.a (built by 'make test').
TEST_TOOLS := $(BUILD)/tests/tools/livesql $(BUILD)/tests/tools/injectlib

$(BUILD)/tests/tools/%: $(BUILD)/obj/tests/tools/%.o $(LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

TEST_TARGETS += $(TEST_TOOLS)

.PHONY: test-tools
test-tools: $(TEST_TOOLS)
