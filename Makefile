# The commands the README names. Everything runs from a local .venv that `make install` builds.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install test demo lint bench clean

install: $(STAMP)

# torch==2.13.0 first: it resolves to the CPU build on local disk, which then satisfies the
# [trainer] extra; a bare `torch` requirement would pull several GB of CUDA wheels instead.
$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev,trainer]'
	touch $(STAMP)

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

demo: install
	$(BIN)/python -m gcpgpu.demo

lint: install
	$(BIN)/ruff check gcpgpu tests

bench: install
	@for f in tests/bench/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
