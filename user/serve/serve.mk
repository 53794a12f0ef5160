# The pages of 'probing serve' (user/serve/web/), embedded in the binary as C strings named
# probing_web_<file name> (user/serve/assets.c), with the build's one embedding rule.
SERVE_WEB   := user/serve/web/index.html user/serve/web/app.js user/serve/web/style.css
SERVE_WEB_O := $(BUILD)/obj/user/serve/web_assets.o

$(eval $(call embed,$(SERVE_WEB_O),probing_web_,$(SERVE_WEB)))

# Archived with the modules, through $^ of the library's rule.
$(LIB): $(SERVE_WEB_O)
