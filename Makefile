# Every target sets up what it needs: `make serve` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: serve alert-demo test lint typecheck check bench bench-compare bench-instructions bench-instructions-server fuzz proto clean

# The editable install builds the compiled scanner (C) and compiles the hot path with mypyc
# (setup.py; src/toolwatch/compiled.py lists the modules): rebuild when their source changes.
# TOOLWATCH_PURE_PYTHON=1 runs the source instead, without rebuilding (a debugger, coverage).
COMPILED := $(shell $(PYTHON) src/toolwatch/compiled.py)
$(STAMP): pyproject.toml setup.py src/toolwatch/ingest/_wire.c src/toolwatch/compiled.py $(COMPILED)
	@echo 'Installing toolwatch into $(VENV), its compiled parts too (quiet: a few minutes the first time)'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The quick start runs the example policy; `make serve CONFIG=my.yaml ARGS=...` for yours.
# toolwatch_build_info{revision} names the checkout's commit (an image's build argument does
# the same, Dockerfile); a TOOLWATCH_REVISION already set wins.
CONFIG ?= examples/toolwatch.yaml
REVISION ?= $(or $(TOOLWATCH_REVISION),$(shell git describe --always --dirty 2>/dev/null))
serve: $(STAMP)
	@TOOLWATCH_REVISION=$(REVISION) $(BIN)/toolwatch serve --config $(CONFIG) $(ARGS)

# From zero to a firing alert: toolwatch and a Prometheus on free ports (needs prometheus).
alert-demo: $(STAMP)
	@$(BIN)/python scripts/alert_demo.py $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/mypy
	$(BIN)/pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/ruff format --check

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench.run $(ARGS)

# `make bench-compare BASE=<git rev>`: that revision and this checkout side by side, as ratios.
BASE ?= HEAD
BASE_DIR = bench/results/base-$(shell git rev-parse --short $(BASE))
bench-compare: $(STAMP)
	test -d $(BASE_DIR) || git worktree add --detach $(BASE_DIR) $(BASE)
	test -x $(BASE_DIR)/.venv/bin/toolwatch || \
		($(PYTHON) -m venv $(BASE_DIR)/.venv && $(BASE_DIR)/.venv/bin/pip install --quiet -e $(BASE_DIR))
	$(BIN)/python -m bench.compare $(BASE_DIR) . $(ARGS)

# Instructions per span, stage by stage, under valgrind's callgrind: unlike a timing, the count
# repeats to within 0.05%, so a change's effect shows to a fraction of a percent (needs valgrind).
bench-instructions: $(STAMP)
	$(BIN)/python -m bench.instructions $(ARGS)

# The same for the whole server process (gRPC, event loop, ticker, engine) and the ceiling.
bench-instructions-server: $(STAMP)
	$(BIN)/python -m bench.server_instructions $(ARGS)

# tools/fuzz/: the compiled OTLP scanner under AddressSanitizer, fuzzed against protobuf;
# then the whole pipeline under atheris, coverage-guided (corpus and crashes in .fuzz/).
FUZZ_SECONDS ?= 300
FUZZ_SEED ?= 1
fuzz: $(STAMP)
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_SEED=$(FUZZ_SEED) PYTHON=$(BIN)/python tools/fuzz/run.sh
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_SEED=$(FUZZ_SEED) PYTHON=$(BIN)/python tools/fuzz/pipeline.sh

# Regenerate src/toolwatch/_proto from proto/ (the generated code is committed).
proto: $(STAMP)
	PYTHON=$(BIN)/python scripts/gen_proto.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build
	find src -name '*.so' -delete
