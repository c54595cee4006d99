# The commands the README names. Everything runs from a local .venv that `make install` builds.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# The suite runs on two pytest-xdist workers: much of it waits on subprocesses (gcloud, trainers, emulated
# nodes), so two workers overlap those waits even on two cores; every test is independent of the others
# (each has its own emulator state) and waits for the event it expects. A third worker no longer pays once
# the emulator's launchers start warm (issue 37, side by side at one commit: pytest part 566.6 s with two,
# 563.6 s with three) and only makes each test share the cores more. --durations prints the 60 slowest,
# so each run says where time goes.
TEST_WORKERS ?= 2
# TORCH_VERSION and the rest of the image's PyTorch pairing, declared once.
include containers/versions.env

SKY_VENV := .venv-skypilot
SKY_REQS := tests/conformance/skypilot/requirements.txt

.PHONY: install test demo lint bench gpu-check clean conformance-skypilot

install: $(STAMP)

# torch==$(TORCH_VERSION) first: it resolves to the CPU build on local disk, which then satisfies the
# [trainer] extra; a bare `torch` requirement would pull several GB of CUDA wheels instead. torchao at
# the image's version (--no-deps: it needs only torch) so the fp8 layer selection is tested, not skipped.
$(STAMP): pyproject.toml setup.py containers/versions.env Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q --no-deps torchao==$(TORCHAO_VERSION)
	$(BIN)/python -m pip install -q -e '.[dev,trainer]'
	touch $(STAMP)
	@echo "gcpgpu is installed in $(BIN)/: run '. $(BIN)/activate' to put it on PATH in this shell"

# Every part runs, whatever the one before it did: gcpgpu's pytest suite, then SkyPilot's provisioner run
# (SKIP_SKYPILOT=1 leaves it out: its own venv, about a minute to build once). Both outcomes are printed
# at the end, and the target fails if either part failed. (The sub-make is named through SKY_PART: a
# recipe line that spells the MAKE variable itself runs even under `make -n`, pytest and all.)
SKY_PART = $(MAKE) --no-print-directory conformance-skypilot
test: install
	@pytest_rc=0; $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=60 $(PYTEST_ARGS) || pytest_rc=$$?; \
	sky_rc=0; sky="skipped (SKIP_SKYPILOT=1)"; \
	if [ "$(SKIP_SKYPILOT)" != 1 ]; then \
	  $(SKY_PART) || sky_rc=$$?; \
	  sky=$$([ $$sky_rc = 0 ] && echo passed || echo FAILED); \
	fi; \
	echo "make test: pytest $$([ $$pytest_rc = 0 ] && echo passed || echo "FAILED (exit $$pytest_rc)");" \
	     "SkyPilot conformance $$sky"; \
	[ $$pytest_rc = 0 ] && [ $$sky_rc = 0 ]

# SkyPilot's GCP provisioner against the emulator, in a venv of its own: SkyPilot pins click<8.2,
# which gcpgpu's own tests cannot run under, so it cannot join the dev dependencies.
conformance-skypilot: $(SKY_VENV)/.installed
	GCPGPU_REQUIRE_SKYPILOT=1 $(SKY_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/conformance/skypilot

$(SKY_VENV)/.installed: $(SKY_REQS) pyproject.toml
	$(PYTHON) -m venv $(SKY_VENV)
	$(SKY_VENV)/bin/python -m pip install -q --upgrade pip
	$(SKY_VENV)/bin/python -m pip install -q -r $(SKY_REQS) -e .
	touch $@

# PORT=N (the emulator's REST port) and GRPC_PORT=N (its gRPC port) choose them; free ones otherwise.
demo: install
	$(BIN)/python -m gcpgpu.cli.demo $(if $(PORT),--port $(PORT)) $(if $(GRPC_PORT),--grpc-port $(GRPC_PORT))

lint: install
	$(BIN)/ruff check gcpgpu tests

bench: install
	@for f in tests/bench/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# On a machine with NVIDIA GPUs (or inside the training image: python -m gcpgpu.trainer.gpu_check):
# measures the trainer and prints one table; without a GPU it says so in one line and exits 0.
# A GPU machine that has its own CUDA torch and perhaps no network needs no venv: when .venv is absent
# and $(PYTHON) imports torch, that torch runs the check from this checkout (an older one accepted and
# said so in the report). GPU_CHECK_ARGS="--only auto" runs only the auto-batch rows, "--only mfu" the one-GPU bf16 rows the baseline has (each a few minutes).
GPU_CHECK_ARGS ?=
gpu-check:
	@if [ -x $(BIN)/python ] || ! $(PYTHON) -c 'import torch' 2>/dev/null; then \
	  $(MAKE) --no-print-directory install && $(BIN)/python -m gcpgpu.trainer.gpu_check $(GPU_CHECK_ARGS); \
	else \
	  PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m gcpgpu.trainer.gpu_check --accept-torch $(GPU_CHECK_ARGS); \
	fi

clean:
	rm -rf $(VENV) $(SKY_VENV) build dist *.egg-info .pytest_cache .ruff_cache
