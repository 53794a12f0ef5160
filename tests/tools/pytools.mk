# Test tools of the Python-stack work: pystacks (Python stacks read from outside) and
# pystack-bpf (the BPF walker, through tests/bpf/pystack_test.bpf.c: a test program, built
# here, not with the product's bpf/*.bpf.c).
PYTOOLS := $(BUILD)/tests/tools/pystacks $(BUILD)/tests/tools/pystack-bpf

$(BUILD)/tests/bpf/pystack_test.bpf.o: tests/bpf/pystack_test.bpf.c tests/bpf/pystack_test.h \
		$(wildcard bpf/*.h) vmlinux/$(ARCH)/vmlinux.h
	$(call msg,BPF,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) -I. -c $< -o $@

$(BUILD)/tests/bpf/pystack_test.skel.h: $(BUILD)/tests/bpf/pystack_test.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name pystack_test_bpf > $@

$(BUILD)/obj/tests/tools/pystack_bpf.o: $(BUILD)/tests/bpf/pystack_test.skel.h

$(BUILD)/tests/tools/pystacks: $(BUILD)/obj/tests/tools/pystacks.o $(LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/tests/tools/pystack-bpf: $(BUILD)/obj/tests/tools/pystack_bpf.o $(LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

TEST_TARGETS += $(PYTOOLS)

# pystacks built with AddressSanitizer and UBSan over the modules that read the target
# (pyproc and what it uses), for the stress test of reading locals that change under us.
PYSTACKS_ASAN := $(BUILD)/tests/tools/pystacks-asan
PYSTACKS_ASAN_SRCS := tests/tools/pystacks.c \
	user/python/pyproc.c user/python/pythreads.c user/python/pycode.c user/python/pyobj.c \
	user/python/pylocals.c user/python/pyrepr.c user/python/pyrepr_unicode.c \
	user/python/pymem.c user/python/pyelf.c user/python/pylines.c user/base/procmaps.c \
	user/base/bmap.c user/base/strpool.c user/base/util.c user/base/log.c user/base/escape.c \
	user/base/taskwait.c pyoffsets/pyoffsets.c pyoffsets/tables.c pyoffsets/opcodes.c

$(PYSTACKS_ASAN): $(PYSTACKS_ASAN_SRCS) $(wildcard user/*/*.h pyoffsets/*.h bpf/*.h)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -std=gnu11 -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
		-fno-sanitize-recover=undefined -D_GNU_SOURCE -Wall $(INCLUDES) -o $@ \
		$(PYSTACKS_ASAN_SRCS) -lbpf -lelf -ldw -lz

TEST_TARGETS += $(PYSTACKS_ASAN)
