# Test tools linked with libprobing.a (built by 'make test'):
#   folded2db   folded stacks -> a recording, through the store API
#   livesql     SQL on the live tables of a process (user/livedb)
#   injectlib   load any library into a process with the injector
TEST_TOOLS := $(BUILD)/tests/tools/folded2db $(BUILD)/tests/tools/livesql \
	      $(BUILD)/tests/tools/injectlib

$(BUILD)/tests/tools/%: $(BUILD)/obj/tests/tools/%.o $(LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

TEST_TARGETS += $(TEST_TOOLS)
# Keep the objects (they would be removed as intermediates, and rebuilt every time).
.SECONDARY: $(patsubst $(BUILD)/tests/tools/%,$(BUILD)/obj/tests/tools/%.o,$(TEST_TOOLS))

# An agent built like build/libprobing-agent.so, with one more embedded helper
# (tests/workloads/live/agent_extra_helper.py): the C side must load it without knowing its name.
TEST_AGENT_EXTRA := $(BUILD)/tests/tools/libprobing-agent-extra.so
TEST_EXTRA_PY := injector/py/agent.py tests/workloads/live/agent_extra_helper.py

$(eval $(call embed,$(BUILD)/tests/tools/agent_extra_py.o,probing_py_,$(TEST_EXTRA_PY),probing_py_modules))

$(TEST_AGENT_EXTRA): $(BUILD)/tests/tools/agent_extra_py.o $(filter-out $(BUILD)/obj/injector/agent_py.pic.o,$(AGENT_OBJS))
	$(call msg,LINK,$@)
	$(Q)$(CC) -shared -fPIC -Wl,-z,nodelete -o $@ $^ -lpthread -ldl

TEST_TOOLS += $(TEST_AGENT_EXTRA)
TEST_TARGETS += $(TEST_AGENT_EXTRA)

.PHONY: test-tools tools
test-tools tools: $(TEST_TOOLS)
