# Top-level entry points. `make demo` and `make test` are README's quick start.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all setup build demo test test-full bench install format clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure -L fast -j 2

test-full: build
	cd $(BUILD) && ctest --output-on-failure -j 2

# make install PREFIX=DIR (default /usr/local): the binary, the planner's
# clusters, the core library, its public headers and a pkg-config file
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

bench: build
	bash scripts/bench.sh $(BUILD)

# clang-format (Debian's clang-format 14) with the repository's .clang-format
format:
	clang-format -i $$(git ls-files 'src/*.[ch]' 'tests/*.[ch]' 'bench/*.[ch]')

clean:
	rm -rf $(BUILD)
