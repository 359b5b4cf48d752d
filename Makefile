# The two commands of the README do all the set-up on a fresh machine:
#   make test   -- create .venv, install tutorial_lib[dev], run the tests (offline, CPU)
#   make book   -- the same set-up, then build the book, executing every chapter
# Chapters run at TUTORIAL_SCALE=ci unless you say otherwise (make book TUTORIAL_SCALE=full).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
TUTORIAL_SCALE ?= ci
# No test or CI build may reach the Hugging Face Hub.
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install test book check-notebooks sync-notebooks lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# CPU wheel, pinned: an unpinned torch would pull several GB of CUDA packages.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

check-notebooks: $(STAMP)
	$(BIN)/python -m tutorial_lib.book check-notebooks

sync-notebooks: $(STAMP)
	$(BIN)/jupytext --sync notebooks/*.py

book: $(STAMP) check-notebooks
	rm -rf _build/html _build/jupyter_execute
	TUTORIAL_SCALE=$(TUTORIAL_SCALE) $(BIN)/jupyter-book build . --warningiserror --keep-going
	$(BIN)/python -m tutorial_lib.book check-html _build/html

lint: $(STAMP)
	$(BIN)/ruff check tutorial_lib tests benchmarks notebooks/*.py

clean:
	rm -rf _build .pytest_cache
