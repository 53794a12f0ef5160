# The agent's table of embedded Python helpers: {name, source} pairs for every
# injector/py/NAME.py (the sources themselves are embedded by the top-level Makefile as
# probing_py_NAME). With it the C side loads every helper without knowing their names, so a
# new helper file needs no C change (docs/live.md, "Extending the agent").
AGENT_PYMODS_S := $(BUILD)/obj/injector/agent_pymods.S
AGENT_PYMODS_O := $(BUILD)/obj/injector/agent_pymods.pic.o

$(AGENT_PYMODS_S): $(AGENT_PY) injector/agent.mk
	$(Q)mkdir -p $(@D)
	$(Q){ echo '.section .data.rel.ro,"aw"'; echo '.balign 8'; \
	  echo '.global probing_py_modules'; echo '.hidden probing_py_modules'; \
	  echo 'probing_py_modules:'; \
	  for f in $(sort $(AGENT_PY)); do n=$$(basename $$f .py); \
	    echo ".quad .Lpyname_$$n, probing_py_$$n"; done; \
	  echo '.quad 0, 0'; echo '.section .rodata'; \
	  for f in $(sort $(AGENT_PY)); do n=$$(basename $$f .py); \
	    echo ".Lpyname_$$n: .asciz \"$$n\""; done; \
	  echo '.section .note.GNU-stack,"",@progbits'; } > $@

$(AGENT_PYMODS_O): $(AGENT_PYMODS_S)
	$(call msg,AS,$@)
	$(Q)$(CC) -c -fPIC $< -o $@

# Linked in through $^ of the agent's rule.
$(AGENT): $(AGENT_PYMODS_O)
