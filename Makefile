# deltaserve build. `make test` and `make run` first install what is missing
# (Debian packages, npm packages for the test tools), then build.
#
#   make                 build build/deltaserve and the default model
#   make test            set up, build, run every test (prints "N passed, N failed")
#   make test-sanitize   the same suite built with -fsanitize=address,undefined
#   make run             set up, build, create the default model, show it

CC      ?= gcc
BUILD   ?= build
SAN     ?= 0
PKGS    := libcjson libpcre2-8 libutf8proc
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
LDLIBS  := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lcjson) -lm -lpthread
LDFLAGS := $(OPT)

LAYERS  := common kernels loading tokenizer model engine server
LIB_SRC := $(foreach d,$(LAYERS),$(wildcard src/$(d)/*.c))
CLI_SRC := $(wildcard src/cli/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

BIN     := $(BUILD)/deltaserve
DEFAULT_MODEL := $(BUILD)/models/default.gguf

.PHONY: all deps test test-sanitize run clean tests-bin
all: $(BIN) $(DEFAULT_MODEL)

deps:
	@bash scripts/setup.sh

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libdeltaserve.a: $(LIB_OBJ)
	@rm -f $@
	@ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(BUILD)/libdeltaserve.a
	@echo "  LINK    $@"
	@$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libdeltaserve.a $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libdeltaserve.a tests/unit/testing.h
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

clean:
	rm -rf build build-san

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
