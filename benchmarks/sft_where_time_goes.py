"""Where an SFT step of chapter 4's recipe spends its time on a CPU, and how far it is from the
machine's arithmetic: what faster code could still win, before any recipe is cut.

    python benchmarks/sft_where_time_goes.py --game cookingworld --steps 40

Trains ``--steps`` optimiser steps of the ``ci`` preset's recipe for ``--game`` (its data, batch,
micro-batches and learning rate; the tiny model) under ``torch.profiler``, and prints one JSON line:

* seconds per step, tokens per second, and the step count of the whole recipe (so the seconds
  chapter 4 spends on this game's training at this speed);
* the model's arithmetic per token (forward and backward, attention included) and the rate the step
  reaches in GFLOP/s, beside the rate of one large matrix product and of one at the model's own
  shapes: the closer the step is to those, the less any rewrite of it can win;
* the profile's self time by kind of operator (matrix products, attention, element-wise, optimiser,
  data loading, other);
* forward + backward of one micro-batch's attention, at the recipe's mean length, through each of
  PyTorch's attention kernels (the one ``transformers`` picks, ``sdpa``, against the math kernel and
  the written-out ``softmax(QK^T)V`` of eager attention).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from dataclasses import replace

import torch

KINDS = {
    "matrix products": ("aten::mm", "aten::bmm", "aten::addmm", "aten::linear", "aten::matmul"),
    "attention": ("scaled_dot_product", "flash_attention"),
    "optimiser": ("Optimizer.step", "_foreach", "adamw"),
    "data loading": ("DataLoader",),
    "element-wise": ("aten::mul", "aten::add", "aten::silu", "aten::where", "aten::neg", "aten::cat", "aten::pow",
                     "aten::div", "aten::rsqrt", "aten::mean", "aten::sum", "aten::copy_", "aten::fill_", "aten::sub",
                     "aten::exp", "aten::bitwise", "aten::index", "aten::embedding"),
}


def kind_of(name: str) -> str:
    for kind, markers in KINDS.items():
        if any(marker.lower() in name.lower() for marker in markers):
            return kind
    return "other"


def flops_per_token(config, length: float) -> float:
    """Forward + backward (3x forward) arithmetic per token of the body: projections, MLP and causal
    attention at ``length``; the output layer runs only at completion positions and is left out."""
    d, layers, inner = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    kv = config.num_key_value_heads * (d // config.num_attention_heads)
    projections = d * d * 2 + d * kv * 2  # q and o, k and v
    mlp = 3 * d * inner
    attention = 2 * (length / 2) * d  # QK^T and AV over the earlier half of the positions on average
    return 3 * 2 * layers * (projections + mlp + attention)


def attention_kernels(batch: int, heads: int, length: int, head_dim: int, repeats: int = 30) -> dict[str, float]:
    """Milliseconds per forward + backward of one causal attention, by kernel."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, length, head_dim, requires_grad=True) for _ in range(3))
    mask = torch.ones(batch, 1, length, length, dtype=torch.bool).tril()  # what a padded batch passes

    def sdpa():
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()

    def math_kernel():
        with sdpa_kernel(SDPBackend.MATH):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()

    def eager():
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(head_dim)
        (torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v).sum().backward()

    out = {}
    for name, run in (("sdpa (transformers' choice)", sdpa), ("sdpa, math kernel", math_kernel), ("eager", eager)):
        for _ in range(3):
            run()
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        out[name] = round((time.perf_counter() - start) / repeats * 1000, 3)
    return out


def matmul_gflops(rows: int, inner: int, cols: int, repeats: int = 50) -> float:
    """GFLOP/s of one float32 matrix product of this shape: the cores' rate for large matrices, and
    what is left of it at the model's own shapes."""
    a, b = torch.randn(rows, inner), torch.randn(inner, cols)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return round(2 * rows * inner * cols * repeats / (time.perf_counter() - start) / 1e9, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--game", default="cookingworld", choices=["cookingworld", "tictactoe", "guess_the_number", "math"])
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    from torch.profiler import ProfilerActivity, profile

    from tutorial_lib.data.sft import tokenize_examples, train_sft
    from tutorial_lib.lm.models import load_policy
    from tutorial_lib.pipeline import expert_data, sft_settings
    from tutorial_lib.presets import get_preset

    preset = get_preset("ci")
    settings = sft_settings(args.game, preset)
    examples = expert_data(args.game, preset)
    policy = load_policy("tiny")
    lengths = [len(ids) for ids in tokenize_examples(policy.tokenizer, examples)["input_ids"]]
    steps_per_epoch = math.ceil(len(examples) / settings.batch_size)
    recipe_steps = round(steps_per_epoch * settings.epochs) if settings.max_steps is None else settings.max_steps
    short = replace(settings, max_steps=args.steps, progress=False, report_to="none")
    with tempfile.TemporaryDirectory() as folder, profile(activities=[ProfilerActivity.CPU]) as profiler:
        result = train_sft(policy, examples, short, output_dir=folder)
    seconds_per_step = result.seconds / args.steps
    kinds: dict[str, float] = {}
    for event in profiler.key_averages():
        kinds[kind_of(event.key)] = kinds.get(kind_of(event.key), 0.0) + event.self_cpu_time_total
    total = sum(kinds.values())
    mean_length = statistics.fmean(lengths)
    tokens_per_second = settings.batch_size * mean_length / seconds_per_step
    config = policy.model.config
    per_token = flops_per_token(config, mean_length)
    micro = settings.batch_size // settings.micro_batches
    print(json.dumps({
        "game": args.game, "steps_timed": args.steps, "threads": torch.get_num_threads(),
        "examples": len(examples), "mean_tokens_per_example": round(mean_length, 1),
        "seconds_per_step": round(seconds_per_step, 4), "tokens_per_second": round(tokens_per_second),
        "recipe_steps": recipe_steps, "recipe_training_seconds_at_this_speed": round(recipe_steps * seconds_per_step),
        "flops_per_token": round(per_token), "gflops_per_second": round(per_token * tokens_per_second / 1e9, 1),
        "profile_share": {k: round(v / total, 3) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
        "matmul_gflops": {"2048x2048x2048": matmul_gflops(2048, 2048, 2048, repeats=5),
                          "one micro-batch's MLP product": matmul_gflops(micro * round(mean_length), config.hidden_size,
                                                                        config.intermediate_size)},
        "attention_ms_per_micro_batch_layer": attention_kernels(
            micro, config.num_attention_heads, round(mean_length), config.hidden_size // config.num_attention_heads),
    }))


if __name__ == "__main__":
    main()
