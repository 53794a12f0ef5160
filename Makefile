# probing — build, test, demo, install.
#
#   make              build build/probing and build/libprobing-agent.so
#   make test         install missing dependencies (and the Debian unstable root of python3.14,
#                     python3.15 and torch 2.14: scripts/install-sidroot.sh), build, run unit +
#                     integration tests
#   make demo         install missing dependencies, build, record the demo workload -> demo.svg
#   make install      install into $(PREFIX) (default /usr/local)
#   make vmlinux      regenerate vmlinux/x86/vmlinux.h from the running kernel's BTF
#   make deps         install the Debian packages needed to build and test
#   make format-check check the C sources against .clang-format
#   V=1               show full commands
#
# Fragments included at the end (*.mk) add their own targets; sources are picked up by wildcard.

.DELETE_ON_ERROR:
.SUFFIXES:
SHELL := /bin/bash

PREFIX  ?= /usr/local
BUILD   ?= build
ARCH    := x86
CC      ?= gcc
CXX     ?= g++
CLANG   ?= clang
BPFTOOL ?= $(shell command -v bpftool 2>/dev/null || echo /usr/sbin/bpftool)

ifeq ($(V),1)
Q :=
msg :=
else
Q := @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

CFLAGS   ?= -O2 -g
override CFLAGS += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers \
	    -Wshadow -Wformat=2 -fno-strict-aliasing -D_GNU_SOURCE -MMD -MP
INCLUDES := -I$(BUILD) -Iuser -I.
LDLIBS   := -lbpf -lelf -ldw -lz -lsqlite3 -ledit -lmicrohttpd -lpthread -ldl -lstdc++

# ---- sources --------------------------------------------------------------------------------
BPF_SRCS   := $(wildcard bpf/*.bpf.c)
BPF_OBJS   := $(patsubst bpf/%.bpf.c,$(BUILD)/bpf/%.bpf.o,$(BPF_SRCS))
SKELS      := $(patsubst bpf/%.bpf.c,$(BUILD)/%.skel.h,$(BPF_SRCS))

# The probing binary: main.c + cmd_*.c + every other module (the latter also go into
# libprobing.a so unit tests can link single modules).
CMD_SRCS   := $(wildcard user/cmd/*.c)
LIB_SRCS   := $(filter-out $(CMD_SRCS),$(wildcard user/*/*.c)) \
	      $(filter-out pyoffsets/gen_%.c,$(wildcard pyoffsets/*.c)) \
	      $(filter-out injector/agent%.c,$(wildcard injector/*.c))
CMD_OBJS   := $(patsubst %.c,$(BUILD)/obj/%.o,$(CMD_SRCS))
LIB_OBJS   := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
LIB        := $(BUILD)/libprobing.a

AGENT_SRCS := $(wildcard injector/agent*.c)
AGENT_PY   := $(wildcard injector/py/*.py)
AGENT_OBJS := $(patsubst %.c,$(BUILD)/obj/%.pic.o,$(AGENT_SRCS)) $(BUILD)/obj/injector/agent_py.pic.o
AGENT      := $(BUILD)/libprobing-agent.so

PROBING    := $(BUILD)/probing

UNIT_SRCS  := $(wildcard tests/unit/test_*.c)
UNIT_BINS  := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRCS))

.PHONY: all
all: $(PROBING) $(AGENT)

# ---- BPF ------------------------------------------------------------------------------------
BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Ivmlinux/$(ARCH) -Ibpf -Wall \
	      -Wno-unused-function -mcpu=v3

$(BUILD)/bpf/%.bpf.o: bpf/%.bpf.c $(wildcard bpf/*.h) vmlinux/$(ARCH)/vmlinux.h | $(BUILD)/bpf
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/%.skel.h: $(BUILD)/bpf/%.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $(notdir $*)_bpf > $@

# ---- userspace ------------------------------------------------------------------------------
$(BUILD)/obj/%.o: %.c | $(SKELS)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(INCLUDES) -c $< -o $@

$(BUILD)/obj/%.pic.o: %.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -fPIC -fvisibility=hidden $(INCLUDES) -c $< -o $@

# ---- embedded files -------------------------------------------------------------------------
# $(call embed,OBJ,PREFIX,FILES[,TABLE]), evaluated with $(eval): the rules that build the
# object OBJ holding every FILE verbatim as a C string named PREFIX<file name>, and with TABLE a
# {name, string} table of them (scripts/embed.sh). The one way the build embeds a file: the
# agent's Python helpers, the flame graph's script and style (user/report/report.mk), a test
# agent's helpers (tests/tools/tools.mk).
define embed
$(1:.o=.S): $(3) scripts/embed.sh
	$$(call msg,EMBED,$$@)
	$$(Q)mkdir -p $$(@D)
	$$(Q)scripts/embed.sh $(if $(4),-t $(4)) $(2) $(3) > $$@

$(1): $(1:.o=.S) $(3)
	$$(call msg,AS,$$@)
	$$(Q)$$(CC) -c $$< -o $$@
endef

# The agent's Python helpers, and probing_py_modules: {"agent", source}, {"torch", source}...
# With it the C side (injector/agent.c) loads every helper without knowing their names, so a
# new helper file needs no C change (docs/live.md, "Extending the agent").
$(eval $(call embed,$(BUILD)/obj/injector/agent_py.pic.o,probing_py_,$(sort $(AGENT_PY)),probing_py_modules))

$(LIB): $(LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(PROBING): $(CMD_OBJS) $(LIB)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) -rdynamic -o $@ $(CMD_OBJS) $(LIB) $(LDLIBS)

$(AGENT): $(AGENT_OBJS)
	$(call msg,LINK,$@)
	$(Q)$(CC) -shared -fPIC -Wl,-z,nodelete -o $@ $^ -lpthread -ldl

$(BUILD)/tests/unit/%: $(BUILD)/obj/tests/unit/%.o $(LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/bpf:
	$(Q)mkdir -p $@

# ---- tests, demo, deps ----------------------------------------------------------------------
.PHONY: deps test unit integration demo
deps:
	$(Q)scripts/install-deps.sh

# Everything the tests run against (workloads come from the *.mk fragments).
TEST_TARGETS := all $(UNIT_BINS)

unit: $(UNIT_BINS)
	$(Q)tests/run.sh --unit-only

test:
	$(Q)scripts/install-deps.sh --if-missing
	$(Q)scripts/install-sidroot.sh --if-missing
	$(Q)scripts/install-mcp-sdk.sh --if-missing
	$(Q)$(MAKE) --no-print-directory $(TEST_TARGETS)
	$(Q)tests/run.sh $(if $(T),--filter '$(T)')

demo:
	$(Q)scripts/install-deps.sh --if-missing
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/demo.sh

# ---- install, vmlinux, hygiene --------------------------------------------------------------
.PHONY: install vmlinux format-check clean
install: all
	install -D -m 0755 $(PROBING) $(DESTDIR)$(PREFIX)/bin/probing
	install -D -m 0644 $(AGENT) $(DESTDIR)$(PREFIX)/lib/probing/libprobing-agent.so

vmlinux:
	$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > vmlinux/$(ARCH)/vmlinux.h

format-check:
	$(Q)clang-format --dry-run --Werror $(filter-out %/vmlinux.h,$(wildcard user/*/*.[ch] \
		bpf/*.[ch] pyoffsets/*.[ch] injector/*.[ch] tests/unit/*.[ch] tests/workloads/*/*.[ch]))

clean:
	rm -rf $(BUILD)

# Fragments: workloads, benchmarks, generators.
-include $(wildcard */*.mk user/*/*.mk tests/*/*.mk)
-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
