# deltaserve build. `make test` and `make run` first install what is missing
# (Debian packages, npm packages for the test tools), then build.
#
#   make                 build build/deltaserve and the default model
#   make test            set up, build, run every test (prints "N passed, N failed")
#   make test-sanitize   the same suite built with -fsanitize=address,undefined
#   make run             set up, build, create the default model, show it
#   make container       build the container image (Dockerfile) and check /health inside it
#                        (skipped, saying why, where no docker or podman works)

CC      ?= gcc
BUILD   ?= build
SAN     ?= 0
PKGS    := jansson libpcre2-8 libutf8proc libmicrohttpd libcurl nettle libjpeg libpng libwebp libwebpdemux libexif \
           libzmq msgpack
CFLAGS_BASE := -std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
               -Wno-unused-parameter -fno-strict-aliasing -g -Isrc \
               $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
ifeq ($(SAN),1)
  BUILD := build-san
  OPT   := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
else
  OPT   := -O2
endif
CFLAGS  := $(CFLAGS_BASE) $(OPT) $(EXTRA_CFLAGS)
LDLIBS  := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -ljansson) -lgif -lm -lpthread
LDFLAGS := $(OPT)

LAYERS  := common kernels loading image tokenizer model engine grammar jinja server
LIB_SRC := $(foreach d,$(LAYERS),$(wildcard src/$(d)/*.c))
# x86 kernels: each file is built for its own instruction set and only called
# after a run-time check (src/kernels/cpu.c)
ifneq ($(filter x86_64 amd64,$(shell uname -m)),)
LIB_SRC += $(wildcard src/kernels/x86/*.c)
endif
CLI_SRC := $(wildcard src/cli/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

BIN     := $(BUILD)/deltaserve
DEFAULT_MODEL := $(BUILD)/models/default.gguf

.PHONY: all deps test test-sanitize run clean tests-bin bench-replicas container
all: $(BIN) $(DEFAULT_MODEL)

deps:
	@bash scripts/setup.sh

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

AVX2_FLAGS       := -ffp-contract=off -mavx2 -mfma -mf16c
AVX512_FLAGS     := $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
AVX512BF16_FLAGS := $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16
$(BUILD)/src/kernels/x86/%_avx2.o: CFLAGS += $(AVX2_FLAGS)
$(BUILD)/src/kernels/x86/%_avx512.o: CFLAGS += $(AVX512_FLAGS)
$(BUILD)/src/kernels/x86/%_avx512bf16.o: CFLAGS += $(AVX512BF16_FLAGS)
# The quantiser's float searches clamp with compares and selects; without
# trapping maths gcc may vectorise them (the results are the same bits).
$(BUILD)/src/kernels/quant_ref.o: CFLAGS += -fno-trapping-math

$(BUILD)/libdeltaserve.a: $(LIB_OBJ)
	@rm -f $@
	@ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(BUILD)/libdeltaserve.a
	@echo "  LINK    $@"
	@$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libdeltaserve.a $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libdeltaserve.a $(wildcard tests/unit/*.h)
	@mkdir -p $(dir $@)
	@echo "  TEST    $<"
	@$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(BUILD)/libdeltaserve.a $(LDLIBS)

tests-bin: $(BIN) $(TEST_BIN)

# The embedded default model: a small hybrid (Gated DeltaNet + gated attention)
# model with an MTP head and a generated tokenizer, made here, never downloaded.
$(DEFAULT_MODEL): $(BIN)
	@mkdir -p $(dir $@)
	$(BIN) make-model --shape tiny --dtype f32 --format gguf --seed 1 --out $@

test: deps
	$(MAKE) tests-bin
	@BUILD=$(BUILD) bash tests/run.sh

test-sanitize: deps
	$(MAKE) SAN=1 tests-bin
	@BUILD=build-san DS_SANITIZE=1 bash tests/run.sh

run: deps
	$(MAKE) all
	$(BIN) info -m $(DEFAULT_MODEL)
	$(BIN) serve

# Two replicas with KV events behind a prefix-aware picker (llm-d's scoring,
# tests/scale/llmd_index.py) against round-robin: one table of hit rate and
# TTFT. A benchmark, not a test; BENCH_ARGS passes options (--help lists them).
bench-replicas: $(BIN) $(DEFAULT_MODEL)
	/usr/bin/python3 scripts/bench_replicas.py $(BENCH_ARGS)

# Builds the image (Dockerfile) with docker or podman, checks /health inside
# it; says why and skips where no container runtime works.
container:
	@bash scripts/container_check.sh

clean:
	rm -rf build build-san

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)

# --- fuzzing (fuzz/, libFuzzer with clang) ---
#   make fuzz         builds every fuzz/fuzz_*.c target into build-fuzz/
#   make fuzz-smoke   replays fuzz/regressions, then runs each target for
#                     FUZZ_SECONDS (default 20) on a copy of its seed corpus
# The library is compiled with -fsanitize=fuzzer-no-link,address,undefined,
# the targets are linked with -fsanitize=fuzzer,address,undefined.
FUZZ_CC      ?= clang
FUZZ_BUILD   := build-fuzz
FUZZ_SECONDS ?= 20
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := $(CFLAGS_BASE) -Wno-error -O1 -fno-omit-frame-pointer $(FUZZ_SAN)
# the request parser fills sampling parameters with the sampler's defaults;
# fuzz_hf_config makes its seed checkpoints with make-model (src/model/model_make*.c)
FUZZ_LIB_SRC := $(foreach d,common kernels loading image tokenizer grammar jinja server,$(wildcard src/$(d)/*.c)) src/engine/sampler.c \
                $(wildcard src/model/model_make*.c)
# make-model's MTP calibration runs the kernels, which pick the x86 ones at run time
ifneq ($(filter x86_64 amd64,$(shell uname -m)),)
FUZZ_LIB_SRC += $(wildcard src/kernels/x86/*.c)
endif
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(FUZZ_BUILD)/%.o)
FUZZ_SRC     := $(wildcard fuzz/fuzz_*.c)
FUZZ_BIN     := $(FUZZ_SRC:fuzz/%.c=$(FUZZ_BUILD)/%)

.PHONY: fuzz fuzz-bin fuzz-smoke fuzz-clean
fuzz:
	@DS_SETUP_FUZZ=1 bash scripts/setup.sh
	$(MAKE) fuzz-bin

fuzz-bin: $(FUZZ_BIN)

$(FUZZ_BUILD)/src/%.o: src/%.c
	@mkdir -p $(dir $@)
	@echo "  FUZZCC  $<"
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/src/kernels/x86/%_avx2.o: FUZZ_CFLAGS += $(AVX2_FLAGS)
$(FUZZ_BUILD)/src/kernels/x86/%_avx512.o: FUZZ_CFLAGS += $(AVX512_FLAGS)
$(FUZZ_BUILD)/src/kernels/x86/%_avx512bf16.o: FUZZ_CFLAGS += $(AVX512BF16_FLAGS)

$(FUZZ_BUILD)/libdeltaserve.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	@ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz.h $(FUZZ_BUILD)/libdeltaserve.a
	@echo "  FUZZ    $@"
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_BUILD)/libdeltaserve.a $(LDLIBS)

fuzz-smoke: fuzz
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_BUILD=$(FUZZ_BUILD) bash scripts/fuzz_smoke.sh

fuzz-clean:
	rm -rf $(FUZZ_BUILD)

-include $(FUZZ_LIB_OBJ:.o=.d)
