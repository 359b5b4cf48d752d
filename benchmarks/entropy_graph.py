"""What the entropy's autograd graph costs an RL update: memory autograd keeps and seconds of one
scoring pass with its backward, with the entropy measured (no bonus) against trained (a bonus).

    python benchmarks/entropy_graph.py                       # the tiny model and a SmolLM2-shaped one
    python benchmarks/entropy_graph.py --rows 8 --repeats 5

REINFORCE and PPO log each action token's entropy; only PPO's entropy bonus needs its gradient
(``tutorial_lib.rl.rollout.action_logprobs``, ``entropy_gradient``). Its graph holds full-vocabulary
tensors for every scored token; PPO's loss ran a backward pass through it even at a coefficient of
0, REINFORCE only kept it (``bonus`` here is PPO's old step). Both settings run on the same random batch, taking turns for
``--repeats`` rounds, each keeping its fastest; one JSON line per model with the two figures and
their ratios. Random weights (nothing downloaded): the cost is in the shapes, not the values.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tutorial_lib.rl.rollout import action_logprobs
from tutorial_lib.runtime.memory_plan import saved_activation_bytes

#: the book's tiny model (ci) and SmolLM2-135M-Instruct's shape (chapter 9)
SHAPES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, intermediate_size=256, num_attention_heads=4,
                 num_key_value_heads=4, vocab_size=1221),
    "smollm2-135m shape": dict(hidden_size=576, num_hidden_layers=30, intermediate_size=1536,
                               num_attention_heads=9, num_key_value_heads=3, vocab_size=49152),
}
SETTINGS = {"measured": dict(with_entropy=True), "bonus": dict(with_entropy=True, entropy_gradient=True)}


def batch(vocab: int, rows: int, length: int, actions: int) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(0, vocab, (rows, length)),
            "attention_mask": torch.ones(rows, length, dtype=torch.long),
            "action_mask": torch.ones(rows, actions, dtype=torch.bool)}


def kept_bytes(model, inputs, options: dict) -> int:
    return saved_activation_bytes(model, lambda: action_logprobs(model, inputs, **options))


def step_seconds(model, inputs, options: dict) -> float:
    start = time.perf_counter()
    scores = action_logprobs(model, inputs, **options)
    loss = scores.logprobs.sum()
    if options.get("entropy_gradient"):
        loss = loss - 0.0 * scores.entropy.sum()  # a bonus of 0: the graph's cost, not its effect
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--length", type=int, default=150, help="tokens per turn (tic-tac-toe's ~150)")
    parser.add_argument("--actions", type=int, default=41, help="scored tokens per turn (tic-tac-toe's ~41)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    for name, shape in SHAPES.items():
        model = LlamaForCausalLM(LlamaConfig(**shape))
        model.train()
        inputs = batch(shape["vocab_size"], args.rows, args.length, args.actions)
        one_action = {**inputs, "action_mask": inputs["action_mask"][:, :1]}
        kept, kept_one = ({key: kept_bytes(model, scored, options) for key, options in SETTINGS.items()}
                          for scored in (inputs, one_action))
        seconds = {key: float("inf") for key in SETTINGS}
        for _ in range(args.repeats):
            for key, options in SETTINGS.items():
                seconds[key] = min(seconds[key], step_seconds(model, inputs, options))
        scored = args.rows * args.actions
        print(json.dumps({
            "model": name, "rows": args.rows, "length": args.length, "scored_tokens": scored,
            "kept_mib": {key: round(value / 2**20, 1) for key, value in kept.items()},
            "kept_ratio_bonus_over_measured": round(kept["bonus"] / kept["measured"], 2),
            # what one more scored token adds, per vocabulary entry: the output layer's share
            "output_layer_bytes_per_vocab_entry": {
                key: round((kept[key] - kept_one[key]) / (scored - args.rows) / shape["vocab_size"], 1) for key in kept},
            "seconds": {key: round(value, 4) for key, value in seconds.items()},
            "speedup_measured_over_bonus": round(seconds["bonus"] / seconds["measured"], 2),
            "threads": torch.get_num_threads(), "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
        }), flush=True)


if __name__ == "__main__":
    main()
