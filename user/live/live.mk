# The python.* tables the agent's helpers declare (register_table in injector/py/*.py), read by
# scripts/gen-live-tables.py into the header of user/live/livetables.c: the live database knows
# them without the agent, from the one definition the agent serves them by.
PYTHON ?= python3
LIVE_TABLES_H := $(BUILD)/live_tables.h

$(LIVE_TABLES_H): $(AGENT_PY) scripts/gen-live-tables.py
	$(call msg,GEN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(PYTHON) scripts/gen-live-tables.py $(sort $(AGENT_PY)) > $@

$(BUILD)/obj/user/live/livetables.o: $(LIVE_TABLES_H)
