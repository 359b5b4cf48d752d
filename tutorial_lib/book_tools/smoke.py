"""A smoke run of every command-line stage at ``full`` with a real pretrained model (``make smoke-full``;
not a chapter).

    python -m tutorial_lib.book_tools.smoke --out _build/smoke-full [--model smollm2-135m]

The ``full`` preset is what a GPU user runs, yet CI has no GPU and no hub. This runs each stage of
``python -m tutorial_lib`` as a user would type it (a fresh process each), with
``TUTORIAL_SCALE=full`` and the offline model, at the smallest counts: expert data, LoRA SFT, evaluation,
REINFORCE (then resumed), evaluation of the RL policy, PPO with its value head, and math at ``full``
offline (GSM8K must fail with a clear message, and the generator work when asked). Each stage's
JSON line is checked; a stage that fails stops the run with its output. After SFT the stages run in two
lanes side by side. Takes a few minutes on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _stage(name: str, args: list[str], env: dict[str, str], *, expect_error: str | None = None) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tutorial_lib", *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if expect_error is not None:
        if done.returncode != 2 or expect_error not in done.stderr:
            raise SystemExit(f"{name}: expected exit 2 with {expect_error!r}; got {done.returncode}\n{done.stderr[-3000:]}")
        print(f"{name:<28} {seconds:6.1f} s  failed as it should: {done.stderr.strip().splitlines()[-1][:150]}")
        return {}
    if done.returncode != 0:
        raise SystemExit(f"{name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{name:<28} {seconds:6.1f} s  {json.dumps(result)[:150]}")
    return result


def run(out: Path, model: str) -> None:
    import shutil

    shutil.rmtree(out, ignore_errors=True)  # every run starts from nothing, like CI
    env = {**os.environ, "TUTORIAL_SCALE": "full", "TUTORIAL_MODEL": model, "HF_HUB_OFFLINE": "1"}
    game = ["--game", "guess_the_number"]
    # 3 games (~10 examples): the one SFT step trains on every example, and on a CPU each costs
    # SmolLM2's whole forward and backward (36 examples, 8 games: ~70 s of a ~260-s smoke run)
    data = _stage("data", ["data", *game, "--episodes", "3", "--out", str(out / "data"), "--quiet"], env)
    assert data["examples"] > 8 and data["preset"] == "full"
    sft = _stage("sft (LoRA, 1 step)", ["sft", *game, "--data", data["path"], "--max-steps", "1",
                                         "--out", str(out / "sft"), "--quiet"], env)
    assert (out / "sft" / "adapter_config.json").exists(), "LoRA SFT should save adapters"
    assert sft["last_loss"] is not None

    def reinforce_lane(env: dict[str, str]) -> None:
        metrics = _stage("evaluate sft", ["evaluate", *game, "--policy", str(out / "sft"), "--episodes", "4", "--json"], env)
        assert metrics["episodes"] == 4
        rl = ["rl", "--algo", "reinforce", *game, "--init", str(out / "sft"), "--turns-per-iteration", "8",
              "--out", str(out / "reinforce"), "--quiet"]
        _stage("rl reinforce (1 iteration)", [*rl, "--iterations", "1"], env)
        resumed = _stage("rl reinforce --resume", [*rl, "--iterations", "2", "--resume"], env)
        assert resumed["iterations"] == 2, "resume should continue to iteration 2, not start again"
        _stage("evaluate rl", ["evaluate", *game, "--policy", resumed["model"], "--episodes", "4", "--json"], env)

    def ppo_and_math_lane(env: dict[str, str]) -> None:
        _stage("rl ppo (1 iteration)", ["rl", "--algo", "ppo", *game, "--init", str(out / "sft"), "--iterations", "1",
                                        "--turns-per-iteration", "8", "--out", str(out / "ppo"), "--quiet"], env)
        assert (out / "ppo" / "model" / "value_model.pt").exists(), "PPO saves its critic beside the policy"
        math = ["evaluate", "--game", "math", "--policy", model, "--episodes", "2", "--json"]
        _stage("evaluate math (GSM8K offline)", math, env, expect_error="--math-source generated")
        _stage("evaluate math (generator)", [*math, "--math-source", "generated"], env)

    # The stages after SFT need only its adapters: two lanes side by side, one torch thread each (two
    # processes that each spin threads on every core slow each other far more than 2x). Each process
    # spends much of its time importing torch, transformers and TRL on one core, so two lanes finish
    # sooner than one.
    one_thread = {**env, "TUTORIAL_THREADS": "1"}
    with ThreadPoolExecutor(max_workers=2) as pool:
        running = [pool.submit(lane, one_thread) for lane in (reinforce_lane, ppo_and_math_lane)]
        for finished in running:
            finished.result()  # a stage's SystemExit, or a failed check, is raised here


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tutorial_lib.book_tools.smoke", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("_build/smoke-full"))
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    run(args.out, args.model)
    print(f"smoke-full: every stage passed in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
