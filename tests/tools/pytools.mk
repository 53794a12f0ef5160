# Test tools of the Python-stack work: pystacks (Python stacks read from outside) and
# pystack-bpf (the BPF walker, through bpf/pystack_test.bpf.c).
PYTOOLS := $(BUILD)/tests/tools/pystacks $(BUILD)/tests/tools/pystack-bpf

$(BUILD)/tests/tools/pystacks: $(BUILD)/obj/tests/tools/pystacks.o $(LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/tests/tools/pystack-bpf: $(BUILD)/obj/tests/tools/pystack_bpf.o $(LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

TEST_TARGETS += $(PYTOOLS)
