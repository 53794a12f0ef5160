# Native test workloads, built -O2 WITHOUT frame pointers (the unwinder must not need them),
# except fpret, built with them (unwinding through the CFI of frame-pointer code).
WL_DIR    := $(BUILD)/workloads
WL_CFLAGS := -O2 -g -fomit-frame-pointer -Itests/workloads/native
WL_BINS   := $(addprefix $(WL_DIR)/,split deep shared inlined templ threads dlopen blocker churn twowaits \
	       libwlshared.so libwlplugin.so plt libwlplt.so libslowctor.so fpret)

$(WL_DIR)/%: tests/workloads/native/%.c tests/workloads/native/wl.h
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(WL_CFLAGS) -o $@ $< -lpthread -ldl

$(WL_DIR)/templ: tests/workloads/native/templ.cpp
	$(call msg,CXX,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(WL_CFLAGS) -o $@ $<

$(WL_DIR)/lib%.so: tests/workloads/native/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(WL_CFLAGS) -fPIC -shared -o $@ $<

$(WL_DIR)/shared: tests/workloads/native/shared.c $(WL_DIR)/libwlshared.so
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -o $@ $< -L$(WL_DIR) -lwlshared -Wl,-rpath,'$$ORIGIN'

$(WL_DIR)/plt: tests/workloads/native/plt.c tests/workloads/native/wl.h tests/workloads/native/wl_threads.h $(WL_DIR)/libwlplt.so
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -o $@ $< -L$(WL_DIR) -lwlplt -lpthread -Wl,-rpath,'$$ORIGIN'

$(WL_DIR)/fpret: tests/workloads/native/fpret.c tests/workloads/native/wl.h tests/workloads/native/wl_threads.h
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(WL_CFLAGS) -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -o $@ $< -lpthread

.PHONY: workloads
workloads: $(WL_BINS)
TEST_TARGETS += workloads
