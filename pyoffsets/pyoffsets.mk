# pyoffsets: the table generator and `make pyoffsets` (regenerate pyoffsets/tables.c from the
# DWARF of every `pyenv prefix 3.X` for the versions pyoffsets.h supports; fails if one is
# missing, leaving tables.c as is).
PYOFFSETS_GEN := $(BUILD)/pyoffsets-gen

$(PYOFFSETS_GEN): pyoffsets/gen_offsets.c pyoffsets/pyoffsets.h
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(filter-out -MMD -MP,$(CFLAGS)) $(INCLUDES) -o $@ $< -ldw -lelf

TEST_TARGETS += $(PYOFFSETS_GEN)

.PHONY: pyoffsets
pyoffsets: $(PYOFFSETS_GEN)
	$(Q)pyoffsets/gen-tables.sh $(PYOFFSETS_GEN) > pyoffsets/tables.c.tmp
	$(Q)mv pyoffsets/tables.c.tmp pyoffsets/tables.c
	$(Q)echo "  GEN      pyoffsets/tables.c"

# `make pyopcodes`: regenerate pyoffsets/opcodes.c with the dis module of every
# `pyenv prefix 3.X`, 3.10-3.13 (fails if one is missing, leaving opcodes.c as is).
.PHONY: pyopcodes
pyopcodes:
	$(Q)pyoffsets/gen-opcodes.sh > pyoffsets/opcodes.c.tmp
	$(Q)mv pyoffsets/opcodes.c.tmp pyoffsets/opcodes.c
	$(Q)echo "  GEN      pyoffsets/opcodes.c"
