# reprokit: `make reproduce` reruns the published benchmarks; `make test` runs the test suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INV := $(BIN)/inv
ARGS ?=

.PHONY: help reproduce images test lint report bench bench-gpu node-bundle node-rehearsal clean

help:  ## this list
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

# torch's CPU wheels from PyTorch's own index, for a first look on a machine without a GPU (no CUDA
# stack: benchmarks/README.md gives the sizes): make reproduce TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
# The cpu image's lock without its hashes (those are the image's files, for its Python): the same
# versions here, whichever Python and wheels this machine takes.
CONSTRAINTS := $(VENV)/constraints.txt

$(CONSTRAINTS): accelerators/cpu/lock.txt | $(BIN)/activate
	sed -E 's/ +--hash=[^ ]+//g' $< > $@

# What reproducing needs (the kit and its trainers' stack), and no test tool; --no-compile: Python
# compiles the modules a run imports, not every file of every package (0.3 GB). Each stamp changes
# only when the pins do, so a second `make` installs nothing.
$(VENV)/.reproduce: pyproject.toml $(CONSTRAINTS)
	$(BIN)/pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(BIN)/pip install --quiet --no-compile --index-url $(TORCH_INDEX) torch torchvision -c $(CONSTRAINTS))
	$(BIN)/pip install --quiet --no-compile -e ".[train]" -c $(CONSTRAINTS)
	touch $@

# The tests' tools and the MLflow export on top (make test, lint, bench), and the venv's bytecode written
# once (about 25 CPU-s): where PYTHONDONTWRITEBYTECODE is set (this machine, CI), a venv installed with
# --no-compile never gets it, and every one of the suite's ~400 Python processes compiled torch and
# transformers again (about 5 CPU-s a trainer start). -x: torch's one file in Python 3.12's syntax.
$(VENV)/.test: $(VENV)/.reproduce
	$(BIN)/pip install --quiet -e ".[train,mlflow,test]" -c $(CONSTRAINTS)
	$(BIN)/python -m compileall -q -j 0 -x 'torch/testing/_internal/py312_intrinsics\.py$$' \
	  "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	touch $@

RECIPE ?= all

reproduce: $(VENV)/.reproduce  ## rerun every recipe (RECIPE=name for one) at the scale that fits this machine
	$(INV) reproduce $(RECIPE) $(ARGS)

images: $(VENV)/.reproduce  ## build the image of this machine's accelerator (ACCELERATOR: a folder of accelerators/, or auto)
	$(INV) build --accelerator $${ACCELERATOR:-auto} $(ARGS)

# The suite on WORKERS processes (pytest-xdist; WORKERS=0 runs it in this process); a file's tests of one
# service (the Docker engine, the Slurm cluster), and those sharing a fixture made once per module, in turn
# on one worker (--dist loadgroup, tests/conftest.py). One worker more than the cores: about a seventh of a
# worker's time is spent waiting (on the engine, the cluster, a signal's grace), and the extra one fills it.
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

# The kit's Python sources: ruff checks them, and `make test` writes their bytecode once before the suite
# (under a second): where PYTHONDONTWRITEBYTECODE is set, every one of the suite's Python processes compiled
# the kit, its trainers and the test helpers again (0.05 CPU-s an `inv`, 0.3-0.5 a trainer). Images, wheels
# and bundles leave __pycache__ out.
SOURCES := reprokit scripts tests tasks.py benchmarks accelerators recipes

test: $(VENV)/.test  ## run the test suite (container and Slurm tests run where an engine/cluster answers)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check --quiet $(SOURCES)
	$(BIN)/python -m compileall -q -j 0 $(SOURCES)
	$(BIN)/pytest -q -ra -n $(WORKERS) --dist loadgroup $(ARGS)

lint: $(VENV)/.test  ## ruff's checks and formatting
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)

report: $(VENV)/.reproduce  ## rewrite the newest session's report
	$(INV) report latest

bench: $(VENV)/.test  ## data-path and kit-overhead benchmarks (table + CSV in benchmarks/results/)
	$(BIN)/python -m benchmarks.run $(ARGS)

bench-gpu: $(VENV)/.test  ## GPU throughput benchmarks (needs a CUDA device)
	$(BIN)/python -m benchmarks.run --gpu $(ARGS)

# A bare, air-gapped GPU node (README.md, "On a bare GPU node"): what travels to it, rehearsed here first.
node-bundle: $(VENV)/.reproduce  ## the wheels a bare GPU node lacks, into node-bundle/ (needs PyPI; reprokit/barenode/node.yaml)
	$(BIN)/python -m reprokit.barenode bundle node-bundle $(ARGS)

SLICES ?=
node-rehearsal: $(VENV)/.reproduce  ## every cell of the node's slices through its trainer on the CPU, at its published size (SLICES="a b")
	$(BIN)/python -m reprokit.barenode rehearse $(SLICES) $(ARGS)

clean:  ## remove rendered files and caches (results/ is kept)
	rm -rf rendered .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
