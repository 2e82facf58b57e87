# Thin wrapper around CMake. `make run` and `make test` are all a fresh machine needs.
# BUILD may be relative or absolute (`make run BUILD=/tmp/b`): the programs run as $(BUILD)/x.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 30
# libFuzzer seed: empty for a random one; CI derives it from the commit (see .ci/run)
FUZZ_SEED ?=

.PHONY: all build setup run test example bench sanitize valgrind fuzz cross install clean

all: build

setup:
	@./scripts/setup

$(BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTA_WERROR=ON $(CMAKE_FLAGS)

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/tensorattn demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Trains a small attention model to reverse digit sequences (examples/train_reverse.c),
# then decodes with it through a KV cache (examples/generate.c: tokens per second for
# float32, bfloat16 and float16 caches).
example: build
	$(BUILD)/train_reverse --save $(BUILD)/reverse.safetensors
	$(BUILD)/generate --load $(BUILD)/reverse.safetensors

bench: build
	$(BUILD)/tensorattn bench

# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer.
sanitize: setup
	cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DTA_SANITIZE=ON -DTA_WERROR=ON
	cmake --build build-sanitize -j $(JOBS)
	cd build-sanitize && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS) -E '^install_consumer$$'
# (install_consumer is left out: the installed static library is instrumented, and a
# plain consumer build cannot link the sanitizer runtimes; `make test` runs it.)

# The suite under valgrind memcheck (ctest -T memcheck): every test under valgrind (the
# per-ISA runs through tests/run_isa, which sets TA_ARCH and execs the test: hence
# --trace-children); a valgrind error or a definite/indirect leak fails the test
# (--error-exitcode=1). Valgrind emulates no AVX-512 (its cpuid hides it), so the
# avx512 variants are reported as skipped. The DartConfiguration.tcl
# that ctest -T memcheck reads is written here (the project does not include(CTest)).
# Narrow, explained suppressions: tests/valgrind.supp.
VALGRIND_OPTIONS ?= --error-exitcode=1 --trace-children=yes --leak-check=full --errors-for-leak-kinds=definite,indirect \
	--show-leak-kinds=definite,indirect --track-origins=no --quiet
valgrind:
	@./scripts/setup valgrind
	cmake -S . -B build-valgrind -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTA_WERROR=ON
	cmake --build build-valgrind -j $(JOBS)
	printf '%s\n' "SourceDirectory: $(CURDIR)" "BuildDirectory: $(CURDIR)/build-valgrind" \
		"MemoryCheckCommand: $$(command -v valgrind)" \
		"MemoryCheckCommandOptions: $(VALGRIND_OPTIONS)" \
		"MemoryCheckSuppressionFile: $(CURDIR)/tests/valgrind.supp" \
		> build-valgrind/DartConfiguration.tcl
	cd build-valgrind && OMP_NUM_THREADS=2 ctest -T memcheck --output-on-failure -j $(JOBS) \
		-E '$(VALGRIND_EXCLUDE)' --timeout 3000
# Left out under valgrind: install_consumer (builds a package, runs no library code of
# its own); train_reverse_short (a training run: > 12 minutes under valgrind; its layer,
# backward and optimiser paths are in test_attention_backward and test_optim); mca_loops
# (gcc and llvm-mca on the kernel sources, no library code); python_package (pip and a
# Python interpreter with torch under valgrind: hours; the module's C is small glue over the
# library calls the other tests cover).
VALGRIND_EXCLUDE ?= ^(install_consumer|train_reverse_short|mca_loops|python_package)$$

# libFuzzer targets (clang, ASan + UBSan): built into build-fuzz, each run for
# FUZZ_SECONDS on its committed corpus (fuzz/corpus/<target>); see fuzz/Makefile.
fuzz:
	@./scripts/setup fuzz
	$(MAKE) -f fuzz/Makefile OUT=build-fuzz -j $(JOBS) all
	$(MAKE) -f fuzz/Makefile OUT=build-fuzz FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_SEED=$(FUZZ_SEED) run

# The library for aarch64 with the cross compiler (cmake/toolchain-aarch64.cmake): only
# the portable kernels, no x86 flags; the static library only (no target cmocka/cjson).
cross:
	@./scripts/setup cross
	cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
		-DCMAKE_BUILD_TYPE=Release -DTA_WERROR=ON -DTA_BUILD_TESTS=OFF -DTA_BUILD_CLI=OFF
	cmake --build build-aarch64 -j $(JOBS) --target tensorattn_static

# PREFIX=/opt/ta installs there (else the configured CMAKE_INSTALL_PREFIX, /usr/local);
# DESTDIR=/stage stages the install under that root (cmake --install reads it).
PREFIX ?=
install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix "$(PREFIX)")

clean:
	rm -rf $(BUILD) build-sanitize build-valgrind build-fuzz build-aarch64
