# reprokit: `make reproduce` reruns the published benchmarks; `make test` runs the test suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INV := $(BIN)/inv
ARGS ?=

.PHONY: help reproduce images test lint report bench bench-gpu clean

help:  ## this list
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

# The stamp changes only when the pins do, so a second `make` installs nothing.
$(VENV)/.installed: pyproject.toml docker/locks/cpu.txt | $(BIN)/activate
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[train,mlflow,dev]" -c docker/locks/cpu.txt
	touch $@

RECIPE ?= all

reproduce: $(VENV)/.installed  ## rerun every recipe (RECIPE=name for one) at the scale that fits this machine
	$(INV) reproduce $(RECIPE) $(ARGS)

images: $(VENV)/.installed  ## build the image of this machine's accelerator (ACCELERATOR=cuda|gaudi2|cpu)
	$(INV) build --accelerator $${ACCELERATOR:-auto} $(ARGS)

test: $(VENV)/.installed  ## run the test suite (container and Slurm tests run where an engine/cluster answers)
	$(BIN)/ruff check reprokit scripts tests tasks.py benchmarks
	$(BIN)/ruff format --check --quiet reprokit scripts tests tasks.py benchmarks
	$(BIN)/pytest -q -ra $(ARGS)

lint: $(VENV)/.installed  ## ruff's checks and formatting
	$(BIN)/ruff check reprokit scripts tests tasks.py benchmarks
	$(BIN)/ruff format --check reprokit scripts tests tasks.py benchmarks

report: $(VENV)/.installed  ## rewrite the newest session's report
	$(INV) report latest

bench: $(VENV)/.installed  ## data-path and kit-overhead benchmarks (table + CSV in benchmarks/results/)
	$(BIN)/python -m benchmarks.run $(ARGS)

bench-gpu: $(VENV)/.installed  ## GPU throughput benchmarks (needs a CUDA device)
	$(BIN)/python -m benchmarks.run --gpu $(ARGS)

clean:  ## remove rendered files and caches (results/ is kept)
	rm -rf rendered .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
