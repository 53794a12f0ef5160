# Benchmark workloads (not part of make test): make bench-build
BENCH_DIR := $(BUILD)/bench

$(BENCH_DIR)/work: bench/work.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -g -fomit-frame-pointer -o $@ $<

$(BENCH_DIR)/pingpong: bench/pingpong.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -g -Wall -pthread -o $@ $<

$(BENCH_DIR)/uprobe_floor: bench/uprobe_floor.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -g -Wall -o $@ $< -lbpf

.PHONY: bench-build bench
bench-build: all $(BENCH_DIR)/work $(BENCH_DIR)/pingpong $(BENCH_DIR)/uprobe_floor
bench: bench-build
	$(Q)/usr/bin/python3 bench/run.py
