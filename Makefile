# Two commands do all set-up on a fresh machine:
#   make run    install dependencies and the default model, build, generate text
#   make test   install dependencies and the default model, build, run the whole suite
BUILD ?= build
JOBS ?= $(shell nproc)
PROMPT ?= The capital of France is
N ?= 64
CMAKE_FLAGS ?=

.PHONY: all deps model build run test asan fuzz clean

all: build

deps:
	@scripts/install-deps.sh

model: deps
	@scripts/fetch-model.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

run: build model
	$(BUILD)/bin/kvasir run -p "$(PROMPT)" -n $(N)

test: build model
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps model
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DKVASIR_SANITIZE=ON -DKVASIR_NATIVE=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo"

# libFuzzer targets, each run for FUZZ_SECONDS.
FUZZ_SECONDS ?= 30
FUZZ_TARGETS ?= fuzz_gguf fuzz_tokenizer fuzz_jinja fuzz_quant_dot fuzz_protocol fuzz_http fuzz_grammar fuzz_imatrix fuzz_transfer fuzz_kv_block
fuzz: deps
	cmake -S . -B build-fuzz -G Ninja -DKVASIR_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build-fuzz -j $(JOBS) --target $(FUZZ_TARGETS)
	@for t in $(FUZZ_TARGETS); do f=build-fuzz/bin/$$t; echo "== $$t ($(FUZZ_SECONDS) s)"; mkdir -p build-fuzz/corpus/$$t; \
	  seeds=""; [ -d tests/fuzz/seeds/$$t ] && seeds=tests/fuzz/seeds/$$t; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=10 -max_len=65536 build-fuzz/corpus/$$t $$seeds > build-fuzz/$$t.log 2>&1 \
	    || { tail -40 build-fuzz/$$t.log; exit 1; }; tail -2 build-fuzz/$$t.log; done

clean:
	rm -rf build build-asan build-fuzz
