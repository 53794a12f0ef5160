# The pages of 'probing serve' (user/serve/web/), embedded in the binary as C strings named
# probing_web_<file name> (user/serve/assets.c): each file verbatim and a NUL, with .incbin.
# The same symbols as the build's one embedding rule would give: $(call embed,$(SERVE_WEB_O),
# probing_web_,$(SERVE_WEB)).
SERVE_WEB   := user/serve/web/index.html user/serve/web/app.js user/serve/web/style.css
SERVE_WEB_O := $(BUILD)/obj/user/serve/web_assets.o

$(SERVE_WEB_O:.o=.S): $(SERVE_WEB) user/serve/serve.mk
	$(call msg,EMBED,$@)
	$(Q)mkdir -p $(@D)
	$(Q){ echo '.section .rodata'; \
	  for f in $(SERVE_WEB); do s=probing_web_$$(basename $$f | tr -c 'A-Za-z0-9_\n' '_'); \
	    echo ".global $$s"; echo ".hidden $$s"; echo "$$s:"; echo ".incbin \"$$f\""; \
	    echo '.byte 0'; done; \
	  echo '.section .note.GNU-stack,"",@progbits'; } > $@

$(SERVE_WEB_O): $(SERVE_WEB_O:.o=.S) $(SERVE_WEB)
	$(call msg,AS,$@)
	$(Q)$(CC) -c $< -o $@

# Archived with the modules, through $^ of the library's rule.
$(LIB): $(SERVE_WEB_O)
