"""Did a change to the RL code keep its numbers? Short REINFORCE and PPO runs, fingerprinted.

    python benchmarks/rl_fingerprint.py --out /tmp/before.json          # on the old code
    python benchmarks/rl_fingerprint.py --out /tmp/after.json --against /tmp/before.json

Four short tic-tac-toe runs of a small tiny model, built offline (REINFORCE with the baseline per
state and with GEM's ReBN; PPO with a shared critic, and with a separate one, a KL penalty and reward
whitening), each from the same seed: every logged metric of every iteration (times left out) and a
SHA-256 of the final weights (and PPO's value model). Training on one CPU with one thread is
deterministic, so a refactor that keeps the maths gives the same file bit for bit; ``--against``
names every run and metric that differs. Run both sides on the same machine with
``TUTORIAL_THREADS=1`` (kernels and thread counts round differently). Code from before
``rl_loop.train`` (2dbbe6f and older) is fingerprinted with its own copy of this script (in a
worktree of that commit, ``PYTHONPATH`` set to it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import torch

from tutorial_lib.lm.models import load_policy
from tutorial_lib.lm.tiny_model import TinyConfig
from tutorial_lib.rl.ppo import PPO, PPOSettings
from tutorial_lib.rl.reinforce import Reinforce, ReinforceSettings
from tutorial_lib.rl.rl_loop import train

#: a model small enough that the four runs take a minute or two on one core
TINY = TinyConfig(vocab_size=600, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, corpus_episodes=6)
GAMES = dict(opponent="random", agent_mark="alternate")
SHARED = dict(turns_per_iteration=24, num_envs=6, microbatch_turns=5, learning_rate=1e-2, env_options=GAMES)
RUNS = {
    "reinforce": (Reinforce, ReinforceSettings(iterations=3, **SHARED)),
    "reinforce_rebn": (Reinforce, ReinforceSettings(iterations=2, normalise="rebn", **SHARED)),
    "ppo": (PPO, PPOSettings(iterations=3, minibatch_turns=8, **SHARED)),
    "ppo_separate_kl": (PPO, PPOSettings(iterations=2, minibatch_turns=8, kl_coef=0.1, critic="separate",
                                               whiten_rewards=True, **SHARED)),
}


def digest(module: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def fingerprint() -> dict:
    out = {}
    for name, (algorithm, settings) in RUNS.items():
        torch.manual_seed(0)
        policy = load_policy("tiny", tiny_config=TINY)
        with tempfile.TemporaryDirectory() as folder:
            result = train(algorithm, policy, "tictactoe", settings, out_dir=folder, progress=False)
        value_model = getattr(result.algorithm, "value_model", None)
        out[name] = {"weights": digest(policy.model), "value_model": digest(value_model) if value_model else None,
                     "history": [{k: v for k, v in row.items() if not k.endswith("_seconds")} for row in result.history]}
    return out


def differences(before: dict, after: dict) -> list[str]:
    found = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old is None or new is None:
            found.append(f"{name}: only in {'the new' if old is None else 'the old'} fingerprint")
            continue
        found += [f"{name}: {key} differs" for key in ("weights", "value_model") if old[key] != new[key]]
        for step, (a, b) in enumerate(zip(old["history"], new["history"]), 1):
            found += [f"{name}, iteration {step}: {key} {a.get(key)!r} -> {b.get(key)!r}"
                      for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
        if len(old["history"]) != len(new["history"]):
            found.append(f"{name}: {len(old['history'])} iterations -> {len(new['history'])}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="write the fingerprint here (JSON)")
    parser.add_argument("--against", help="an earlier fingerprint to compare with")
    args = parser.parse_args()
    result = fingerprint()
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True))
    print(json.dumps({name: run["weights"] for name, run in result.items()}))
    if args.against:
        found = differences(json.loads(Path(args.against).read_text()), json.loads(json.dumps(result)))
        print("\n".join(found) if found else "identical: every metric of every iteration, and the final weights")
        sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
