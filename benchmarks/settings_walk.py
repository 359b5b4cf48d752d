"""How far a reader follows a run's settings through the library: two walks, traced (``sys.settrace``).

    TUTORIAL_THREADS=1 python benchmarks/settings_walk.py

* **train's settings**: every library function the settings object of a one-iteration PPO run
  (tic-tac-toe, a small tiny model, validation on) is passed to as an argument;
* **the CLI's rl arguments**: every library function called from ``main`` while
  ``rl --algo ppo --game tictactoe --preset ci --iterations 3 --turns-per-iteration 8 --save-every 1``
  becomes settings, up to where the SFT policy would be loaded.

Rooms: distinct functions entered; returns: calls (each comes back once). Comprehensions and
lambdas are left out. Runs on code from before ``rl_loop.train`` too (``train_ppo``), with
``PYTHONPATH`` set to a worktree of it. Issue 84; the counts are in
``benchmarks/results/rl_refactor_fingerprints.md``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter

import torch

import tutorial_lib
from tutorial_lib.lm.models import load_policy
from tutorial_lib.lm.tiny_model import TinyConfig

LIBRARY = os.path.dirname(tutorial_lib.__file__)
TINY = TinyConfig(vocab_size=600, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, corpus_episodes=6)
CLI = ["rl", "--algo", "ppo", "--game", "tictactoe", "--preset", "ci", "--iterations", "3", "--turns-per-iteration",
       "8", "--save-every", "1"]


def room(frame) -> str | None:
    """``file:function`` of a library function's frame, else ``None``."""
    code = frame.f_code
    if not code.co_filename.startswith(LIBRARY) or code.co_name.startswith("<"):
        return None
    return f"{os.path.relpath(code.co_filename, LIBRARY)}:{code.co_qualname}"


def train_walk() -> Counter:
    from tutorial_lib.rl.ppo import PPOSettings

    settings = PPOSettings(iterations=1, turns_per_iteration=8, num_envs=4, microbatch_turns=4, minibatch_turns=8,
                           validate_every=1, validation_episodes=2,
                           env_options=dict(opponent="random", agent_mark="alternate"))
    try:
        from tutorial_lib.rl.ppo import PPO
        from tutorial_lib.rl.rl_loop import train

        def run(policy, out):
            return train(PPO, policy, "tictactoe", settings, out_dir=out, progress=False)
    except ImportError:  # before rl_loop.train
        from tutorial_lib.rl.ppo import train_ppo

        def run(policy, out):
            return train_ppo(policy, "tictactoe", settings, out_dir=out, progress=False)

    torch.manual_seed(0)
    policy = load_policy("tiny", tiny_config=TINY)
    calls: Counter = Counter()

    def tracer(frame, event, arg):
        name = room(frame) if event == "call" else None
        if name:
            code = frame.f_code
            arguments = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            if any(frame.f_locals.get(a) is settings for a in arguments):
                calls[name] += 1

    with tempfile.TemporaryDirectory() as out:
        sys.settrace(tracer)
        try:
            run(policy, out)
        finally:
            sys.settrace(None)
    return calls


class Stop(Exception):
    pass


def cli_walk() -> Counter:
    import tutorial_lib.pipeline as pipeline
    from tutorial_lib.__main__ import main

    def stop(*args, **kwargs):
        raise Stop

    pipeline.sft_policy = stop  # the walk ends where the policy would be loaded
    calls: Counter = Counter()
    inside = []

    def tracer(frame, event, arg):
        if event == "call":
            if frame.f_code.co_name == "main" and frame.f_code.co_filename.startswith(LIBRARY):
                inside.append(True)
            name = room(frame) if inside else None
            if name:
                calls[name] += 1

    with tempfile.TemporaryDirectory() as out:
        sys.settrace(tracer)
        try:
            main([*CLI, "--out", out])
        except Stop:
            pass
        finally:
            sys.settrace(None)
    return calls


def main() -> None:
    for name, walk in (("train's settings", train_walk), ("the CLI's rl arguments", cli_walk)):
        calls = walk()
        print(f"{name}: {len(calls)} rooms, {sum(calls.values())} returns")
        for key, count in sorted(calls.items()):
            print(f"    {count:3d}  {key}")


if __name__ == "__main__":
    main()
