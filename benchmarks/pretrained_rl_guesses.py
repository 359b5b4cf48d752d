"""Where a GuessTheNumber policy puts its next guess: the probability of every whole guess 1-50.

    python benchmarks/pretrained_rl_guesses.py --preset small \
        "find, lr 1e-4=$HOME/.cache/tutorial_lib/pretrained-rl/small-gtn-50-seed0-e84d2e5f7f" --out /tmp/guesses.json

REINFORCE can only reinforce what it samples. After a history of guesses on 1-50 (the game's
feedback replayed through the real environment), this scores ``\\boxed{N}`` for every N as the
policy's whole answer (the product of its tokens' probabilities) and reports the
mass inside the range the feedback leaves, the mass within 2 of that range's midpoint (where binary
search would guess), and the four likeliest guesses; ``--temperature`` scores them as a sampler at
that temperature draws them. The SFT checkpoint of the preset (data order 0)
is always scored first; each ``name=folder`` adds a run folder of ``benchmarks/pretrained_rl.py``
(its ``model`` subfolder).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

#: histories on 1-50 in 7 turns that the SFT policy reaches, and a secret consistent with each
HISTORIES = {"after 20 too high (11-19 left)": ([5, 8, 9, 10, 20], 15),
             "after 20 too low, 31 too high (21-30 left)": ([5, 8, 9, 10, 20, 31], 25),
             "first guess (1-50)": ([], 25)}


def guess_distribution(policy, guesses: list[int], secret: int, temperature: float = 1.0) -> dict:
    """The policy's probability of each whole guess 1-50 after ``guesses`` in a game of ``secret``,
    sampling at ``temperature`` (each token's logits divided by it, as the sampler does)."""
    import torch

    from tutorial_lib import envs
    from tutorial_lib.lm.prompts import Turn

    if not 1 <= secret <= 50:
        raise ValueError(f"the secret must lie in 1-50, got {secret}")
    env = envs.make("guess_the_number", preset=None, low=1, high=50, max_turns=7)
    seed = next(s for s in range(100_000) if env.reset(seed=s) and env.target == secret)
    observation, info = env.reset(seed=seed)
    turns = [Turn(observation, info=info)]
    for guess in guesses:
        turns[-1].action = f"\\boxed{{{guess}}}"
        observation, *_, info = env.step(turns[-1].action)
        turns.append(Turn(observation, info=info))
    low, high = env.known_low, env.known_high
    tokenizer, model = policy.tokenizer, policy.model
    model.eval()
    text = policy.prompt_for("guess_the_number", env.task, turns)  # the text it reads when it plays
    prompt = tokenizer(text, return_tensors="pt").input_ids[0]
    probability = {}
    with torch.no_grad():
        for n in range(1, 51):
            ids = tokenizer(text + f"\\boxed{{{n}}}", return_tensors="pt").input_ids[0]
            if not torch.equal(ids[:len(prompt)], prompt):
                raise RuntimeError("the answer changed the prompt's tokens: scores would be of another prompt")
            logprobs = (model(ids[None]).logits[0, len(prompt) - 1:-1].float() / temperature).log_softmax(-1)
            probability[n] = math.exp(float(logprobs.gather(1, ids[len(prompt):, None]).sum()))
    middle = (low + high) // 2
    likeliest = sorted(probability, key=probability.get, reverse=True)[:4]
    return {"range_left": [low, high], "mass_on_guesses": sum(probability.values()),
            "inside": sum(p for n, p in probability.items() if low <= n <= high),
            "near_middle": sum(p for n, p in probability.items() if abs(n - middle) <= 2),
            "likeliest": [[n, probability[n]] for n in likeliest]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", help="name=folder of a pretrained_rl.py run")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--temperature", type=float, default=1.0, help="the sampler's (the runs': 1.5)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from tutorial_lib.lm.models import load_policy
    from tutorial_lib.pipeline import sft_policy
    from tutorial_lib.presets import get_preset

    policies = {"SFT": lambda: sft_policy("guess_the_number", get_preset(args.preset), data_seed=0)}
    for run in args.runs:
        name, folder = run.split("=", 1)
        policies[name] = lambda folder=folder: load_policy(str(Path(folder) / "model"))
    results = {}
    for name, load in policies.items():
        policy = load()
        results[name] = {label: guess_distribution(policy, guesses, secret, args.temperature)
                         for label, (guesses, secret) in HISTORIES.items()}
        for label, found in results[name].items():
            print(f"{name} | {label}: range left {found['range_left']}, on a guess {found['mass_on_guesses']:.3f}, "
                  f"inside {found['inside']:.3f}, within 2 of the middle {found['near_middle']:.2e}, likeliest "
                  + " ".join(f"{n} ({p:.3f})" for n, p in found["likeliest"]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
