"""Torch threads on a busy machine: one tiny-model training step, alone and beside a neighbour.

    python benchmarks/threads.py [--steps 30] [--neighbour-threads 1 2]

A reader's laptop is never idle. PyTorch's CPU threads meet at the end of every parallel region, and
while they wait for each other they spin for a while before sleeping (libgomp, which torch's Linux
wheels use, spins ~300,000 times by default): when another process holds a core, the thread that
should be running is not, and its siblings burn the other cores waiting for it. This script times
the same SFT step (the tiny model, a batch of 16 sequences of 160 tokens) with each torch thread
count, with OpenMP's default wait, a shorter spin and ``OMP_WAIT_POLICY=PASSIVE`` (read once when torch loads,
so each measurement is its own process), first alone and then beside a neighbour process that keeps
``--neighbour-threads`` threads busy, and prints seconds per step and the ratio to the idle
machine's best.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def neighbour(threads: int) -> None:
    """Keep ``threads`` cores busy with matrix products until killed (the busy neighbour)."""
    import torch

    torch.set_num_threads(threads)
    a = torch.randn(512, 512)
    while True:
        a = torch.tanh(a @ a)


def measure(threads: int, steps: int) -> float:
    """Median seconds per training step of the tiny model with ``threads`` torch threads."""
    import torch

    from tutorial_lib.lm.models import load_policy

    torch.set_num_threads(threads)
    model = load_policy("tiny").model
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(0, model.config.vocab_size, (16, 160))
    times = []
    for i in range(steps + 3):
        start = time.perf_counter()
        model(input_ids=batch, labels=batch).loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        if i >= 3:  # the first steps warm the allocator up
            times.append(time.perf_counter() - start)
    return statistics.median(times)


#: how idle OpenMP threads wait: libgomp's default (spin ~300,000 times, then sleep), a shorter
#: spin, or sleeping at once (``PASSIVE``)
WAITS = {"default": {}, "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000"},
         "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"}}


def in_process(args: list[str], wait: str = "default", **kwargs) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    return subprocess.Popen([sys.executable, __file__, *args], env={**env, **WAITS[wait]}, text=True, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--neighbour-threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--waits", nargs="+", choices=list(WAITS), default=list(WAITS))
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)  # a child: one measurement
    parser.add_argument("--neighbour", type=int, help=argparse.SUPPRESS)  # a child: the neighbour
    args = parser.parse_args()
    if args.measure:
        print(measure(args.measure, args.steps))
        return
    if args.neighbour:
        neighbour(args.neighbour)
        return
    cores = len(os.sched_getaffinity(0))
    rows = []
    for neighbour_threads in [0, *args.neighbour_threads]:
        busy = in_process(["--neighbour", str(neighbour_threads)]) if neighbour_threads else None
        time.sleep(3 if busy else 0)  # let it start spinning
        for wait in args.waits:
            for threads in sorted({1, cores}):
                child = in_process(["--measure", str(threads), "--steps", str(args.steps)], wait,
                                   stdout=subprocess.PIPE)
                seconds = float(child.communicate()[0].split()[-1])
                rows.append({"cores": cores, "neighbour_threads": neighbour_threads, "wait": wait,
                             "torch_threads": threads, "seconds_per_step": round(seconds, 4)})
                print(json.dumps(rows[-1]), flush=True)
        if busy:
            busy.kill()
            busy.wait()
    best_idle = min(r["seconds_per_step"] for r in rows if r["neighbour_threads"] == 0)
    print("\nneighbour threads | wait | torch threads | s/step | x idle best")
    for r in rows:
        print(f"{r['neighbour_threads']:>17} | {r['wait']:>23} | {r['torch_threads']:>13} | "
              f"{r['seconds_per_step']:.4f} | {r['seconds_per_step'] / best_idle:.2f}")


if __name__ == "__main__":
    main()
