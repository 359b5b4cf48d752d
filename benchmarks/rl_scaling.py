"""The same RL iterations on one process and on several (``accelerate launch``): turns per second.

    python benchmarks/rl_scaling.py [--game guess_the_number] [--algo reinforce] [--iterations 4]
        [--turns 256] [--init FOLDER] [--out benchmarks/results/rl_scaling_cpu.jsonl]

Runs ``python -m tutorial_lib rl`` three ways, one after the other, on the same policy and settings:

* 1 process, 1 thread;
* 1 process, as many threads as cores (how a single run uses this machine);
* N processes (the cores) x 1 thread, under ``accelerate launch`` with ``configs/accelerate/ddp.yaml``.

Each run's ``metrics.csv`` gives, per iteration, the seconds spent sampling and training, the
seconds the main process spent in collective calls (``sync_seconds``, the gradient all-reduce's
part as ``grad_allreduce_seconds``), and the turns played by all processes together; the figure is turns per second over the iterations after
the first (which pays for warm-up), and the ratios are taken in this run. On a GPU machine with
several devices the N-process line is one process per GPU; a machine with one GPU cannot show
scaling, and the script says so instead of printing a ratio.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(label: str, command: list[str], threads: int, out: Path) -> dict:
    env = {**os.environ, "TUTORIAL_THREADS": str(threads)}
    env.pop("OMP_NUM_THREADS", None)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{label} failed:\n{done.stderr[-3000:]}")
    with (out / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    timed = rows[1:] or rows  # the first iteration pays for warm-up
    seconds = sum(float(r["sample_seconds"]) + float(r["train_seconds"]) for r in timed)
    turns = sum(float(r["turns"]) for r in timed)
    sample = sum(float(r["sample_seconds"]) for r in timed)
    # several processes: the main process's seconds in collective calls (waiting for the others
    # included), and the gradient all-reduce's part of them; one process makes no such call
    sync = sum(float(r.get("sync_seconds") or 0) for r in timed)
    grads = sum(float(r.get("grad_allreduce_seconds") or 0) for r in timed)
    return {"label": label, "threads_per_process": threads, "wall_seconds": round(wall, 1),
            "iterations_timed": len(timed), "turns": int(turns), "turns_per_second": round(turns / seconds, 2),
            "sample_share": round(sample / seconds, 3), "sync_share": round(sync / seconds, 3),
            "grad_allreduce_share": round(grads / seconds, 3), "last_mean_return": float(rows[-1]["mean_return"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="guess_the_number")
    parser.add_argument("--algo", default="reinforce", choices=["reinforce", "ppo"])
    parser.add_argument("--preset", default="ci")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=256)
    parser.add_argument("--init", default=None, help="starting policy (default: the game's chapter-4 checkpoint)")
    parser.add_argument("--out", default=None, help="append the JSON lines to this file too")
    args = parser.parse_args()

    import torch

    from tutorial_lib.presets import get_preset
    from tutorial_lib.records import record_run
    from tutorial_lib.runtime.device import cpu_name, device_kind

    kind = device_kind()
    devices = torch.cuda.device_count() if kind == "cuda" else 0
    processes = devices if kind == "cuda" else (os.cpu_count() or 1)
    if processes < 2:
        raise SystemExit(f"one {kind} device: nothing to scale over (several processes need several devices, "
                         "or several CPU cores)")
    rl = ["-m", "tutorial_lib", "rl", "--algo", args.algo, "--game", args.game, "--preset", args.preset,
          "--iterations", str(args.iterations), "--turns-per-iteration", str(args.turns), "--quiet",
          *(["--init", args.init] if args.init else [])]
    accelerate = [str(Path(sys.executable).with_name("accelerate")), "launch", "--config_file",
                  str(ROOT / "configs" / "accelerate" / "ddp.yaml"), "--num_processes", str(processes)]
    scratch = Path(tempfile.mkdtemp(prefix="rl-scaling-"))
    plans = [("1 process, 1 thread", [sys.executable, *rl], 1),
             (f"1 process, {processes} threads", [sys.executable, *rl], processes),
             (f"{processes} processes, 1 thread each", [*accelerate, *rl], 1)]
    if kind == "cuda":  # threads do not matter there: one process on one GPU against one per GPU
        plans = [plans[0], (f"{processes} processes, one per GPU", [*accelerate, *rl], 1)]
    results = []
    for index, (label, command, threads) in enumerate(plans):
        out = scratch / f"run{index}"
        results.append(run(label, [*command, "--out", str(out)], threads, out))
        print(f"{label}: {results[-1]['turns_per_second']} turns/s", file=sys.stderr, flush=True)
    base, best_single = results[0]["turns_per_second"], max(r["turns_per_second"] for r in results[:-1])
    for line in results:
        line.update(ratio_to_one_thread=round(line["turns_per_second"] / base, 2),
                    ratio_to_best_single_process=round(line["turns_per_second"] / best_single, 2))
        record_run({"benchmark": "rl_scaling", "game": args.game, "algo": args.algo, "cpu": cpu_name(),
                    "device": kind, "turns_per_iteration": args.turns, **line}, args.out, preset=get_preset(args.preset))
    print("\n".join(f"{r['label']:>32}: {r['turns_per_second']:8.1f} turns/s  x{r['ratio_to_one_thread']:.2f} "
                    f"of 1 thread, x{r['ratio_to_best_single_process']:.2f} of the best single process" for r in results))


if __name__ == "__main__":
    main()
