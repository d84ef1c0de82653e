# kiln build: `make` builds build/kiln, its cpu sandbox build/kiln-sandbox and build/libkiln_rt.so;
# `make test` runs every test.
# Everything goes under build/. CUDA is needed only for its headers: the driver is dlopen'ed at run time
# and NVRTC is dlopen'ed too, so the binary runs (and says "no GPU") where there is neither.
#
# Two floors of libraries, each object compiled once: build/libkiln_core.a (src/util, src/formats,
# src/backend: cJSON and libdl only) and build/libkiln.a (the tool: gate, gen, store, search, which
# add SQLite and libcurl). build/kiln and the tests link both; build/libkiln_rt.so, which is loaded
# into the user's PyTorch process, links src/runtime and the core alone, refuses undefined symbols
# and exports only kiln_rt_* (src/runtime/kiln_rt.map).

CUDA_HOME ?= /usr/local/cuda
CC ?= cc
BUILD := build
PYTHON ?= $(CURDIR)/.venv/bin/python

CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -fPIC -I$(CUDA_HOME)/include \
	-DKILN_SOURCE_DIR='"$(CURDIR)"'
CFLAGS ?= -O2
ALL_CFLAGS := $(CFLAGS_BASE) $(CFLAGS)
# cJSON is not on the GPU machine: ship the shared object beside the binary (rpath $ORIGIN/lib).
CORE_LDLIBS := -lcjson -ldl -lm -lpthread
LDLIBS := -lsqlite3 -lcurl $(CORE_LDLIBS)
RPATH := -Wl,-rpath,'$$ORIGIN/lib'
# Families register through weak symbols (src/gen/registry.c): link every member of the tool archive.
WHOLE_LIB := -Wl,--whole-archive $(BUILD)/libkiln.a -Wl,--no-whole-archive $(BUILD)/libkiln_core.a
LIBS_A := $(BUILD)/libkiln.a $(BUILD)/libkiln_core.a

# src/backend/sandbox_main.c is the cpu sandbox's runner, a program of its own (build/kiln-sandbox).
SANDBOX_MAIN := src/backend/sandbox_main.c
CORE_SRC := $(sort $(filter-out $(SANDBOX_MAIN),$(wildcard src/util/*.c src/formats/*.c src/backend/*.c)))
LIB_SRC := $(sort $(wildcard src/gate/*.c src/gen/*.c src/gen/ir/*.c src/store/*.c src/search/*.c))
TEMPLATES := $(sort $(wildcard src/gen/templates/*))
# The gate's own device kernels (poison, masks, the output check), embedded the same way.
GATE_KERNELS := $(sort $(wildcard src/gate/kernels/*))
CLI_SRC := $(sort $(wildcard src/cli/*.c))
RT_SRC := $(sort $(wildcard src/runtime/*.c))
# The dashboard (kiln serve) is linked into the binary only, never into libkiln_rt.so. Its assets are
# embedded like the templates: web/assets/ plus Chart.js and highlight.js from Debian's packages
# libjs-chart.js and libjs-highlight.js (scripts/deps.sh installs them).
WEB_SRC := $(sort $(wildcard src/web/*.c))
JS_DIR ?= /usr/share/javascript
WEB_ASSETS := $(sort $(wildcard web/assets/*)) $(JS_DIR)/chart.js/chart.min.js \
	$(JS_DIR)/highlight.js/highlight.min.js $(JS_DIR)/highlight.js/styles/github.css
WEB_OBJ := $(WEB_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/web/assets.o
WEB_LDLIBS := -lmicrohttpd
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/templates.o \
	$(BUILD)/obj/gen/gate_kernels.o
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
RT_OBJ := $(RT_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC := $(sort $(wildcard tests/c/test_*.c))
TEST_BIN := $(TEST_SRC:tests/c/%.c=$(BUILD)/tests/%)
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
HEADERS := $(shell find src -name '*.h')

.PHONY: all deps demo install test test-c test-py fuzz fuzz-smoke format format-check clean

all: $(BUILD)/kiln $(BUILD)/kiln-sandbox $(BUILD)/libkiln_rt.so $(BUILD)/lib/.stamp \
	$(BUILD)/lib/libmicrohttpd.so.12 $(BUILD)/gemm_bench

$(BUILD)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# Kernel templates are embedded in the binary: nothing needs to sit beside it at run time.
$(BUILD)/gen/templates.c: $(TEMPLATES) scripts/embed.sh
	@mkdir -p $(dir $@)
	bash scripts/embed.sh $@ kiln_embedded_templates $(TEMPLATES)

$(BUILD)/gen/gate_kernels.c: $(GATE_KERNELS) scripts/embed.sh
	@mkdir -p $(dir $@)
	bash scripts/embed.sh $@ kiln_gate_kernels $(GATE_KERNELS)

$(BUILD)/obj/gen/gate_kernels.o: $(BUILD)/gen/gate_kernels.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/obj/gen/templates.o: $(BUILD)/gen/templates.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/gen/assets.c: $(WEB_ASSETS) scripts/embed.sh
	@mkdir -p $(dir $@)
	bash scripts/embed.sh $@ kiln_web_assets $(WEB_ASSETS)

$(BUILD)/obj/web/assets.o: $(BUILD)/gen/assets.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O0 -c $< -o $@

$(JS_DIR)/%:
	@echo "$@ is missing: the dashboard embeds Debian's libjs-chart.js and libjs-highlight.js" \
		"(make deps installs them)" >&2; exit 1

$(BUILD)/libkiln_core.a: $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libkiln.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/kiln: $(CLI_OBJ) $(WEB_OBJ) $(LIBS_A)
	$(CC) $(ALL_CFLAGS) -o $@ $(CLI_OBJ) $(WEB_OBJ) $(WHOLE_LIB) $(LDLIBS) $(WEB_LDLIBS) $(RPATH)

# --no-undefined: a symbol the core does not define (SQLite, a tool function) fails the link here
# instead of the user's import. The version script keeps every core symbol local.
$(BUILD)/libkiln_rt.so: $(RT_OBJ) $(BUILD)/libkiln_core.a src/runtime/kiln_rt.map
	$(CC) $(ALL_CFLAGS) -shared -Wl,--no-undefined -Wl,--version-script=src/runtime/kiln_rt.map \
		-o $@ $(RT_OBJ) $(BUILD)/libkiln_core.a $(CORE_LDLIBS) $(RPATH)

# The cpu sandbox's runner: the process a cpu candidate runs in, under a seccomp filter (libseccomp,
# shipped in build/lib). It links none of kiln's libraries; its OpenMP threads are the candidate's.
$(BUILD)/obj/src/backend/sandbox_main.o: $(SANDBOX_MAIN) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fopenmp -c $< -o $@

# The runner's own heap functions, which the candidate (and every library) binds to (sandbox_main.c).
SANDBOX_EXPORTS := $(foreach f,malloc calloc realloc aligned_alloc posix_memalign free,\
	-Wl,--export-dynamic-symbol=$(f))
$(BUILD)/kiln-sandbox: $(BUILD)/obj/src/backend/sandbox_main.o $(BUILD)/lib/libseccomp.so.2
	$(CC) $(ALL_CFLAGS) -fopenmp -o $@ $< -lseccomp -ldl -lm $(SANDBOX_EXPORTS) $(RPATH)

# The cuBLASLt timing tool for the device (bench/gemm_device.sh): the core library alone.
$(BUILD)/gemm_bench: bench/gemm_bench.c $(BUILD)/libkiln_core.a $(HEADERS) $(BUILD)/lib/.stamp
	$(CC) $(ALL_CFLAGS) -Isrc -o $@ $< $(BUILD)/libkiln_core.a $(CORE_LDLIBS) $(RPATH)

# Copy the third-party shared objects the GPU machine lacks next to the binary.
$(BUILD)/lib/.stamp:
	@mkdir -p $(BUILD)/lib
	cp -L $$(ldconfig -p | awk '/libcjson.so.1 /{print $$NF; exit}') $(BUILD)/lib/
	cp -L $$(ldconfig -p | awk '/libcmocka.so.0 /{print $$NF; exit}') $(BUILD)/lib/
	cp -L $$(ldconfig -p | awk '/libsqlite3.so.0 /{print $$NF; exit}') $(BUILD)/lib/
	@touch $@

# libmicrohttpd (the dashboard) is not there either (it needs libgnutls.so.30, which apt itself needs).
$(BUILD)/lib/libmicrohttpd.so.12:
	@mkdir -p $(BUILD)/lib
	cp -L $$(ldconfig -p | awk '/libmicrohttpd.so.12 /{print $$NF; exit}') $@

# libseccomp is not there either.
$(BUILD)/lib/libseccomp.so.2:
	@mkdir -p $(BUILD)/lib
	cp -L $$(ldconfig -p | awk '/libseccomp.so.2 /{print $$NF; exit}') $@

# The cpu backend's tests start runners.
$(BUILD)/tests/test_backend_cpu $(BUILD)/tests/test_sandbox: $(BUILD)/kiln-sandbox

# The dashboard's test links the web objects, which libkiln.a does not hold.
$(BUILD)/tests/test_web: tests/c/test_web.c $(WEB_OBJ) $(LIBS_A) $(BUILD)/lib/.stamp \
		$(BUILD)/lib/libmicrohttpd.so.12
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Isrc -o $@ $< $(WEB_OBJ) $(WHOLE_LIB) -lcmocka $(LDLIBS) $(WEB_LDLIBS) \
		-Wl,-rpath,'$$ORIGIN/../lib'

# libkiln_rt's test links what build/libkiln_rt.so is made of (the runtime objects and the core, not
# the tool) and wraps the allocator, so that each allocation inside kiln_rt_open can be made to fail.
$(BUILD)/tests/test_runtime: tests/c/test_runtime.c $(RT_OBJ) $(BUILD)/libkiln_core.a \
		$(BUILD)/lib/.stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Isrc -o $@ $< $(RT_OBJ) $(BUILD)/libkiln_core.a -lcmocka $(CORE_LDLIBS) \
		-Wl,--no-undefined -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc -Wl,-rpath,'$$ORIGIN/../lib'

$(BUILD)/tests/%: tests/c/%.c $(LIBS_A) $(BUILD)/lib/.stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Isrc -o $@ $< $(WHOLE_LIB) -lcmocka $(LDLIBS) \
		-Wl,-rpath,'$$ORIGIN/../lib'

deps:
	bash scripts/deps.sh

# make install PREFIX=DIR: kiln under DIR/lib/kiln, laid out like the checkout (build/ with the shared objects
# the binary's rpath expects, python/, src/backend/kiln_cpu.h for cpu kernels, docs/abi.md for the llm
# agent), so that the binary finds all of it from where it runs (kiln_home); and DIR/bin/kiln, which runs it
# with $(PYTHON) unless KILN_PYTHON names another Python with torch. `pip install DIR/lib/kiln/python` puts
# the package into any other environment.
PREFIX ?= /usr/local
KILN_LIBDIR = $(PREFIX)/lib/kiln
# the venv's folder resolved (.venv may be a link), never the interpreter (that would leave the venv)
INSTALL_PYTHON = $(realpath $(dir $(PYTHON)))/$(notdir $(PYTHON))
install: all
	install -d $(DESTDIR)$(KILN_LIBDIR)/build/lib $(DESTDIR)$(KILN_LIBDIR)/src/backend \
		$(DESTDIR)$(KILN_LIBDIR)/docs $(DESTDIR)$(PREFIX)/bin
	rm -rf $(DESTDIR)$(KILN_LIBDIR)/python/kiln && install -d $(DESTDIR)$(KILN_LIBDIR)/python/kiln
	install -m 755 $(BUILD)/kiln $(BUILD)/libkiln_rt.so $(DESTDIR)$(KILN_LIBDIR)/build/
	cp -P $(BUILD)/lib/*.so* $(DESTDIR)$(KILN_LIBDIR)/build/lib/
	install -m 644 python/kiln/*.py python/kiln/_dispatch.cpp $(DESTDIR)$(KILN_LIBDIR)/python/kiln/
	install -m 644 python/pyproject.toml python/kiln_build.py $(DESTDIR)$(KILN_LIBDIR)/python/
	install -m 644 src/backend/kiln_cpu.h $(DESTDIR)$(KILN_LIBDIR)/src/backend/
	install -m 644 docs/abi.md $(DESTDIR)$(KILN_LIBDIR)/docs/
	printf '#!/bin/sh\n# kiln, from make install: the binary under %s, run with a Python that has torch.\n: "$${KILN_PYTHON:=%s}"\nexport KILN_PYTHON\nexec "%s/build/kiln" "$$@"\n' \
		"$(KILN_LIBDIR)" "$(INSTALL_PYTHON)" "$(KILN_LIBDIR)" > $(DESTDIR)$(PREFIX)/bin/kiln
	chmod 755 $(DESTDIR)$(PREFIX)/bin/kiln
	@echo "kiln installed: $(PREFIX)/bin/kiln (Python: $(INSTALL_PYTHON); pip install $(KILN_LIBDIR)/python for import kiln elsewhere)"

demo: all
	bash scripts/demo.sh

test: all $(TEST_BIN) fuzz-smoke
	bash scripts/test.sh

test-c: all $(TEST_BIN)
	bash scripts/test.sh c

test-py: all
	bash scripts/test.sh py

# libFuzzer targets (clang): the safetensors reader and the problem parser.
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -I$(CUDA_HOME)/include
FUZZ_LIB_SRC := src/util/common.c src/formats/dtype.c src/formats/safetensors.c src/formats/problem.c \
	src/formats/expr.c
$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -Isrc -o $@ $< $(FUZZ_LIB_SRC) -lcjson -lm

fuzz: $(FUZZ_BIN)

FUZZ_SECONDS ?= 30
fuzz-smoke: $(FUZZ_BIN)
	bash scripts/fuzz.sh $(FUZZ_SECONDS)

format:
	clang-format -i bench/*.c $$(find src tests -name '*.[ch]' -not -path 'tests/kernels/*' -not -path 'tests/data/*')

format-check:
	clang-format --dry-run -Werror bench/*.c $$(find src tests -name '*.[ch]' -not -path 'tests/kernels/*' -not -path 'tests/data/*')

clean:
	rm -rf $(BUILD)
