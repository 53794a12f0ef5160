# Workloads of the Python-stack tests: a C program embedding CPython, linked against a pyenv
# libpython (3.12, else the newest 3.8+ found) or dlopen'ing it. <exe>.libpython records which.
PY_EMBED_LIBDIR := $(shell for v in 3.12 3.13 3.11 3.10 3.9 3.8; do \
	d=$$(pyenv prefix $$v 2>/dev/null) && [ -e $$d/lib/libpython$$v.so ] && \
	{ echo "$$d/lib $$v"; break; }; done)
PY_EMBED_DIR := $(word 1,$(PY_EMBED_LIBDIR))
PY_EMBED_VER := $(word 2,$(PY_EMBED_LIBDIR))

ifneq ($(PY_EMBED_DIR),)
PY_EMBED_BINS := $(BUILD)/workloads/py_embed_linked $(BUILD)/workloads/py_embed_dlopen

$(BUILD)/workloads/py_embed_linked: tests/workloads/embed/py_embed.c
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -g -Wall -o $@ $< -L$(PY_EMBED_DIR) -lpython$(PY_EMBED_VER) \
		-Wl,-rpath,$(PY_EMBED_DIR) -lpthread
	$(Q)echo "$(PY_EMBED_DIR)/libpython$(PY_EMBED_VER).so.1.0" > $@.libpython

$(BUILD)/workloads/py_embed_dlopen: tests/workloads/embed/py_embed.c
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -g -Wall -DEMBED_DLOPEN -o $@ $< -ldl -lpthread
	$(Q)echo "$(PY_EMBED_DIR)/libpython$(PY_EMBED_VER).so.1.0" > $@.libpython

TEST_TARGETS += $(PY_EMBED_BINS)
endif
