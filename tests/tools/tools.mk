# Test tools: pystacks (Python stacks read from outside) and pystack-bpf (the BPF walker,
# through bpf/pystack_test.bpf.c).
TOOLS_PY := $(BUILD)/tests/tools/pystacks $(BUILD)/tests/tools/pystack-bpf

$(BUILD)/tests/tools/%: $(BUILD)/obj/tests/tools/%.o $(LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/tests/tools/pystack-bpf: $(BUILD)/obj/tests/tools/pystack_bpf.o $(LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

TEST_TARGETS += $(TOOLS_PY)
