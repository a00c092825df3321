# Top-level entry points. `make demo` and `make test` are README's quick start.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all setup build demo test test-full test-sanitize fuzz bench soak install format clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD)

# One test more than cores: the multi-rank tests keep every core busy except
# while mpirun starts ranks and while a test waits on a timeout; at -j 2 the
# 2-core machine was idle 5% of the suite, at -j 3 0.3% (docs/testing.md).
TEST_JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: build
	cd $(BUILD) && ctest --output-on-failure -L fast -j $(TEST_JOBS)

test-full: build
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS)

# make install PREFIX=DIR (default /usr/local): the binary, the planner's
# clusters, the core library, its public headers and a pkg-config file
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# The single-process tests (CTest label "unit": the C unit tests and the
# corpus replays) built with -fsanitize=address,undefined in build-sanitize/,
# LeakSanitizer on, Open MPI's own leaks suppressed (tests/lsan.supp).
# SANITIZE_LABEL=fast runs the whole fast suite instead.
SANITIZE_BUILD ?= build-sanitize
SANITIZE_LABEL ?= unit
test-sanitize: setup
	cmake -S . -B $(SANITIZE_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTDP_SANITIZE=ON -DPTDP_CUDA=OFF
	cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	cd $(SANITIZE_BUILD) && LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
		ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0 \
		UBSAN_OPTIONS=print_stacktrace=1 OMPI_MCA_mca_base_component_disable_dlclose=1 \
		PMIX_MCA_mca_base_component_disable_dlclose=1 \
		ctest --output-on-failure -j 2 -L fast -L '$(SANITIZE_LABEL)'

# libFuzzer (clang) over every parser, FUZZ_SECONDS each (default 60):
# fuzz/run.sh, docs/reliability.md.
fuzz:
	bash fuzz/run.sh

bench: build
	bash scripts/bench.sh $(BUILD)

# 2,000 iterations of a t2 p2 d2 job (8 ranks) with checkpoints every 100:
# memory and descriptors flat, losses equal to a reference run (bench/soak.sh,
# docs/reliability.md; about 10 minutes on 2 cores, not part of make test)
soak: build
	bash bench/soak.sh $(BUILD)

# clang-format (Debian's clang-format 14) with the repository's .clang-format
format:
	clang-format -i $$(git ls-files 'src/*.[ch]' 'tests/*.[ch]' 'bench/*.[ch]')

clean:
	rm -rf $(BUILD)
