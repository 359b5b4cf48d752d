"""SFT sized to the device against the written settings: examples per second through ``train_sft``.

    python benchmarks/sft_sizing.py                          # SmolLM2 + LoRA, GuessTheNumber, 2 steps each
    python benchmarks/sft_sizing.py --steps 10 --out benchmarks/results/sft_sizing.jsonl   # a GPU

Both runs train a fresh copy of the model on the same expert examples with the same optimiser
steps of 64 examples (``SFTSettings.for_pretrained``): ``written`` keeps its micro-batch of 8
accumulated 8 times with activation checkpointing (what ``full`` trained with before), ``sized``
lets :func:`tutorial_lib.runtime.memory_plan.plan_training` choose the micro-batch and checkpointing
from the model and the device's free memory. The runs take turns for ``--repeats`` rounds and each
keeps its fastest. Prints examples/s, tokens/s, the plan, and the ratio; one JSON line per setting.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from tutorial_lib.data.sft import SFTSettings, sized_to_device, tokenize_examples, train_sft
from tutorial_lib.lm.models import load_policy
from tutorial_lib.pipeline import expert_data
from tutorial_lib.presets import get_preset
from tutorial_lib.runtime.device import cpu_name, device_kind


def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"{cpu_name()}, {torch.get_num_threads()} threads"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--game", default="guess_the_number")
    parser.add_argument("--preset", default="small", help="whose expert data to train on")
    parser.add_argument("--steps", type=int, default=2, help="optimiser steps of 64 examples per run")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import peft
    import transformers

    examples = expert_data(args.game, get_preset(args.preset))
    written = SFTSettings.for_pretrained(max_steps=args.steps, logging_steps=args.steps, report_to="none",
                                         progress=False, warmup_ratio=0.0)
    runs = {"written": written, "sized": replace(written, size_to_device=True)}
    best: dict[str, dict] = {}
    for _ in range(args.repeats):
        for name, settings in runs.items():
            policy = load_policy(args.model, lora=True)
            shown = settings
            if settings.size_to_device:  # what the run will choose, for the record
                shown = sized_to_device(settings, policy.model, tokenize_examples(policy.tokenizer, examples,
                                                                                  settings.max_length))
            with tempfile.TemporaryDirectory() as out:
                start = time.perf_counter()
                result = train_sft(policy, examples, settings, output_dir=out)
                wall = time.perf_counter() - start
            examples_seen = args.steps * written.batch_size * written.gradient_accumulation_steps
            row = {"seconds": result.seconds, "wall_seconds": wall, "examples_per_second": examples_seen / result.seconds,
                   "micro_batch": shown.batch_size, "accumulation": shown.gradient_accumulation_steps,
                   "checkpointing": shown.gradient_checkpointing}
            if name not in best or row["seconds"] < best[name]["seconds"]:
                best[name] = row
            del policy
    ratio = best["sized"]["examples_per_second"] / best["written"]["examples_per_second"]
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                "python": platform.python_version()}
    print(f"# {args.model} + LoRA, {args.game}, {args.steps} steps of 64 examples, on {device_name()}")
    for name, row in best.items():
        print(f"{name:8} micro-batch {row['micro_batch']:3} x {row['accumulation']:2}, checkpointing "
              f"{'on ' if row['checkpointing'] else 'off'}: {row['examples_per_second']:7.2f} examples/s "
              f"({row['seconds']:.1f} s)")
    print(f"sized / written: {ratio:.2f}x")
    if args.out:
        with args.out.open("a") as out:
            for name, row in best.items():
                out.write(json.dumps({"benchmark": "sft_sizing", "command": "python " + " ".join(sys.argv),
                                      "device": device_name(), "device_kind": device_kind(), **versions,
                                      "model": args.model, "game": args.game, "steps": args.steps, "setting": name,
                                      **{k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()},
                                      "x_written": round(row["examples_per_second"] / best["written"]["examples_per_second"], 3)})
                          + "\n")


if __name__ == "__main__":
    main()
