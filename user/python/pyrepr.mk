# pyrepr: `make pyrepr-unicode` regenerates user/python/pyrepr_unicode.c (the characters repr()
# escapes) from the Unicode database of the newest CPython (pyenv 3.13 by default).
PYREPR_PYTHON ?= $(shell pyenv prefix 3.13 2>/dev/null)/bin/python3.13

.PHONY: pyrepr-unicode
pyrepr-unicode:
	$(Q)$(PYREPR_PYTHON) scripts/gen-pyrepr-unicode.py > user/python/pyrepr_unicode.c.tmp
	$(Q)mv user/python/pyrepr_unicode.c.tmp user/python/pyrepr_unicode.c
	$(Q)echo "  GEN      user/python/pyrepr_unicode.c"
