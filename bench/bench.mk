# Benchmark workloads (not part of make test): make bench-build
BENCH_DIR := $(BUILD)/bench

$(BENCH_DIR)/work: bench/work.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -g -fomit-frame-pointer -o $@ $<

.PHONY: bench-build bench
bench-build: all $(BENCH_DIR)/work
bench: bench-build
	$(Q)/usr/bin/python3 bench/run.py
