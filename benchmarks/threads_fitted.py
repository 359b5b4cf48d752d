"""Threads fitted to the load (``tutorial_lib.runtime.cpu_threads``) against torch's fixed default.

    python benchmarks/threads_fitted.py [--games 256] [--steps 100] [--neighbour-threads 1 2]

The workload is a chapter's two kinds of work with the untrained tiny model: playing tic-tac-toe games
(token-by-token sampling through ``run_episodes``, many small parallel regions) and training steps
(a batch of 16 x 160 tokens, forward, backward, AdamW, calling ``fit_threads`` before each step as
``train_sft`` does). Each measurement is a fresh process, with ``TUTORIAL_THREADS`` set to torch's
default count (fixed) or to ``adapt``; first on the idle machine, then beside a neighbour process
that keeps ``--neighbour-threads`` threads busy (matrix products) the whole time. It prints the
seconds of each part and, per load, the ratio fixed / fitted (above 1: fitting is faster).
"""

import argparse
import json
import os
import subprocess
import sys
import time

from threads import neighbour  # benchmarks/threads.py: the same busy neighbour


def measure(games: int, steps: int) -> dict:
    import torch

    from tutorial_lib.evaluation.episodes import run_episodes
    from tutorial_lib.lm.models import load_policy
    from tutorial_lib.runtime.cpu_threads import fit_threads

    policy = load_policy("tiny", seed=0)
    fit_threads(now=True)  # the first look: the window starts now
    start = time.perf_counter()
    run_episodes("tictactoe", policy, range(games), batch_size=16, progress=False)
    played = time.perf_counter() - start

    model = policy.model
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(0, model.config.vocab_size, (16, 160))
    start = time.perf_counter()
    for _ in range(steps):
        fit_threads()
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    trained = time.perf_counter() - start
    from tutorial_lib.runtime import cpu_threads

    changes = cpu_threads._GOVERNOR.decisions if cpu_threads._GOVERNOR else 0
    return {"play_seconds": round(played, 2), "train_seconds": round(trained, 2),
            "threads_at_end": torch.get_num_threads(), "thread_changes": changes}


def child(args: list[str], threads: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "TUTORIAL_THREADS": threads, "HF_HUB_OFFLINE": "1"}
    env.pop("OMP_NUM_THREADS", None)
    return subprocess.Popen([sys.executable, __file__, *args], env=env, text=True, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--neighbour-threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--neighbour", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.games, args.steps)))
        return
    if args.neighbour:
        neighbour(args.neighbour)
        return
    import torch

    default = str(torch.get_num_threads())
    rows = []
    for neighbour_threads in [0, *args.neighbour_threads]:
        busy = child(["--neighbour", str(neighbour_threads)], "1") if neighbour_threads else None
        time.sleep(3 if busy else 0)
        for threads in (default, "adapt"):
            run = child(["--measure", "--games", str(args.games), "--steps", str(args.steps)], threads,
                        stdout=subprocess.PIPE)
            result = json.loads(run.communicate()[0].strip().splitlines()[-1])
            rows.append({"neighbour_threads": neighbour_threads, "threads": threads if threads == "adapt"
                         else f"fixed {threads}", **result})
            print(json.dumps(rows[-1]), flush=True)
        if busy:
            busy.kill()
            busy.wait()
    print("\nneighbour threads | part | fixed s | fitted s | fixed / fitted")
    for neighbour_threads in [0, *args.neighbour_threads]:
        fixed, fitted = (r for r in rows if r["neighbour_threads"] == neighbour_threads)
        for part in ("play_seconds", "train_seconds"):
            print(f"{neighbour_threads:>17} | {part.split('_')[0]:>5} | {fixed[part]:7.2f} | {fitted[part]:8.2f} | "
                  f"{fixed[part] / fitted[part]:.2f}")


if __name__ == "__main__":
    main()
