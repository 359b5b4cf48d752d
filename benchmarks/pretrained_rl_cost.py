"""Where the seconds of one RL iteration of SmolLM2 go on this machine, and what each change saves.

    python benchmarks/pretrained_rl_cost.py                  # small preset, GuessTheNumber 1-50 in 7
    python benchmarks/pretrained_rl_cost.py --out benchmarks/results/pretrained_rl_cost.jsonl

One iteration of ``benchmarks/pretrained_rl.py``'s GuessTheNumber runs, taken apart: the policy (the
``small`` preset's SFT checkpoint) collects one batch of turns as the run does (``--envs`` games side
by side until ``--turns`` turns, the games in play finishing), then the same batch goes through
REINFORCE's update (:meth:`~tutorial_lib.rl.reinforce.Reinforce.step`) under each setting, in one
process, one after the other, so every ratio compares like with like:

* ``game order``: micro-batches of consecutive turns, as the update grouped them before; a game's
  first turn (a short prompt) shares a micro-batch with its last (the whole history);
* ``by length``: the library's grouping now (:meth:`~tutorial_lib.rl.rollout.TurnBatch.microbatch_rows`);
* ``by length, micro-batch 16``: twice as many turns per forward pass;
* ``by length, bfloat16 autocast``: the update under ``torch.autocast("cpu", torch.bfloat16)``,
  weights and optimiser in float32. CPUs with bfloat16 in hardware (AVX512-BF16, AMX) compute it
  natively; others emulate it, which the row measures;
* ``by length, top N layers``: only the LoRA adapters of the top ``--top-layers`` layers train (the
  RL setting ``train_top_layers``), so the backward pass stops at the lowest of them; and
  ``by length, bfloat16 autocast, top N layers``: both changes. What training fewer layers does to
  learning is not measured here (``pretrained_rl.py --train-top-layers`` runs it).

With a KL penalty to the start (``--kl-coef``), every iteration also scores its turns under the
frozen start (:meth:`~tutorial_lib.rl.reinforce.Reinforce.reference_kl`, a forward pass, no
backward). Two more rows time that scoring alone, grouped by length:

* ``KL reference, adapters``: the start as a copy of the PEFT model, adapters and all;
* ``KL reference, merged``: the copy the library makes (:func:`~tutorial_lib.rl.kl.frozen_reference`),
  adapters merged into plain layers.

``--cases`` picks rows by name (without ``game order``, no speed relative to it is written).

* ``packed games``: each game's turns in one forward pass (:mod:`~tutorial_lib.rl.packed_games`,
  the REINFORCE setting ``pack_games``), the history they repeat computed once; ``packed games,
  bfloat16 autocast`` with the cheaper arithmetic too, and ``KL reference, merged, packed games``
  the reference's scoring so. ``tokens_passed`` counts the tokens through the model (padding aside),
  ``tokens_per_second`` the turns' own (prompt and action) tokens over the seconds, so it compares
  rows of both layouts; packing is exact, so its ``gradient_cosine`` is 1 up to rounding.

What a cheaper row does to the update's direction, beside its seconds (when ``by length`` runs
first, the float32 gradient of every layer's adapters): ``gradient_cosine``, the cosine between
the row's gradient and float32's over the adapters the row trains (1 up to rounding for the top
layers alone: the loss is the same function of them; below 1 where bfloat16's rounding turns the
direction), and for rows that train the top layers only, ``top_layers_share_l2`` and
``top_layers_share_l1``, the share of float32's whole gradient (squared norm, absolute sum) that
lies in those layers: roughly the share of a first SGD step's (L2) or a first Adam step's (L1,
Adam moving each parameter about equally far) first-order gain that the top layers keep.

The optimiser is SGD with learning rate 0, so every setting updates the same weights. Each
setting runs ``--repeats`` times and keeps its fastest. Prints seconds, trained tokens per second
(prompt and action tokens through the forward and backward), the share of padding, and each
setting's speed relative to ``game order``; one JSON line per setting.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch

from tutorial_lib.lm.lm_parts import train_top_layers
from tutorial_lib.pipeline import sft_policy
from tutorial_lib.presets import get_preset, rl_settings
from tutorial_lib.rl.kl import frozen_reference
from tutorial_lib.rl.packed_games import pack_game, rows_by_game
from tutorial_lib.rl.reinforce import Reinforce
from tutorial_lib.rl.rollout import TurnBatch, collect
from tutorial_lib.runtime.device import cpu_bfloat16_flags, cpu_name


def game_order_rows(batch: TurnBatch, size: int) -> list[torch.Tensor]:
    """Consecutive turns, as the update grouped them before it grouped them by length."""
    return list(torch.arange(len(batch)).split(size))


def gradient_direction(model: torch.nn.Module, reference: dict[str, torch.Tensor] | None) -> dict[str, float]:
    """How the gradient the last update left in ``model`` (the optimiser is SGD at rate 0, so it
    stays) points against ``reference``, float32's gradient of every trained parameter: the cosine
    over the parameters this row trained, and, where it trained fewer, the share of ``reference``'s
    squared norm and absolute sum that those parameters hold. Empty without a reference."""
    if reference is None:
        return {}
    grads = {key: p.grad.detach() for key, p in model.named_parameters() if p.grad is not None and key in reference}
    if not grads:
        return {}
    mine = torch.cat([grad.flatten().double() for grad in grads.values()])
    theirs = torch.cat([reference[key].flatten().double() for key in grads])
    result = {"gradient_cosine": float(torch.nn.functional.cosine_similarity(mine, theirs, dim=0))}
    if len(grads) < len(reference):  # the top layers only: what share of the whole gradient they hold
        whole = torch.cat([grad.flatten().double() for grad in reference.values()])
        result["top_layers_share_l2"] = float(theirs.square().sum() / whole.square().sum())
        result["top_layers_share_l1"] = float(theirs.abs().sum() / whole.abs().sum())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--turns", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--top-layers", type=int, default=8, help="the layers the 'top N layers' rows train")
    parser.add_argument("--out", type=Path, default=None, help="append one JSON line per setting here, as measured")
    parser.add_argument("--cases", nargs="+", default=None,
                        help="the rows to time, by name (default: all), e.g. 'by length' 'KL reference, merged'")
    parser.add_argument("--emulated-bfloat16", action="store_true",
                        help="time the autocast row on a CPU without bfloat16 in hardware too (many minutes)")
    args = parser.parse_args()

    preset = get_preset(args.preset)
    game = "guess_the_number"
    options = {"preset": None, "low": 1, "high": 50, "max_turns": 7}
    policy = sft_policy(game, preset)
    settings = replace(rl_settings(game, preset, "reinforce"), env_options=options)
    started = time.perf_counter()
    rollout = collect(policy, game, range(100_000, 100_000 + args.turns), env_options=options,
                      num_envs=args.envs, turn_budget=args.turns)
    sample_seconds = time.perf_counter() - started
    turns = rollout.turns
    generator = torch.Generator().manual_seed(0)
    batch = TurnBatch.of(turns, policy.tokenizer.pad_token_id, advantages=torch.randn(len(turns), generator=generator))
    tokens = sum(len(t.prompt_ids) + len(t.action_ids) for t in turns)
    action_tokens = batch.action_tokens
    print(f"collected {len(turns)} turns of {len(rollout.records)} games in {sample_seconds:.1f} s "
          f"({tokens} prompt and action tokens, {action_tokens} of them actions)", flush=True)

    reinforce = Reinforce(policy, settings)
    reinforce.optimizer = torch.optim.SGD([p for p in policy.model.parameters() if p.requires_grad], lr=0.0)
    native = cpu_bfloat16_flags()
    cases = [("game order", 8, game_order_rows, None), ("by length", 8, None, None),
             ("by length, micro-batch 16", 16, None, None), ("by length, bfloat16 autocast", 8, None, torch.bfloat16),
             (f"by length, top {args.top_layers} layers", 8, None, None),
             (f"by length, bfloat16 autocast, top {args.top_layers} layers", 8, None, torch.bfloat16),
             ("KL reference, adapters", 8, None, None), ("KL reference, merged", 8, None, None),
             ("packed games", 8, None, None), ("packed games, bfloat16 autocast", 8, None, torch.bfloat16),
             ("packed games, bfloat16 autocast, micro-batch 16", 16, None, torch.bfloat16),
             ("KL reference, merged, packed games", 8, None, None)]
    if not native and not args.emulated_bfloat16:  # emulated, the row took more than 10 minutes on 2 cores
        cases = [case for case in cases if case[3] is None]
    if args.cases:
        unknown = set(args.cases) - {case[0] for case in cases}
        if unknown:
            parser.error(f"no such case {sorted(unknown)}; the cases are {[case[0] for case in cases]}")
        cases = [case for case in cases if case[0] in args.cases]
    import peft
    import transformers

    machine = {"cpu": cpu_name(), "bfloat16_in_hardware": native, "threads": torch.get_num_threads(),
               "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
               "python": platform.python_version(), "model": preset.model, "preset": preset.name,
               "turns": len(turns), "tokens": tokens, "action_tokens": action_tokens,
               "sample_seconds": round(sample_seconds, 1)}
    original = TurnBatch.microbatch_rows
    rows, base, reference = [], None, None  # reference: float32's gradient, every layer ("by length")
    for name, micro, grouping, dtype in cases:
        case_batch = replace(batch, packed=True) if "packed games" in name else batch
        groups = (grouping or original)(case_batch, micro)
        padded = sum(TurnBatch.select(case_batch, r).model_inputs()["input_ids"].numel() for r in groups)
        passed = (sum(len(pack_game([turns[row] for row in rows]).ids) for rows in rows_by_game(turns))
                  if case_batch.packed else tokens)  # the tokens through the model, padding aside
        best = float("inf")
        trainable = [p for p in policy.model.parameters() if p.requires_grad]
        if "layers" in name:  # what the setting does when an algorithm is made
            train_top_layers(policy.model, args.top_layers)
        for _ in range(args.repeats):
            TurnBatch.microbatch_rows = grouping or original
            try:
                context = torch.autocast("cpu", dtype=dtype) if dtype is not None else nullcontext()
                reinforce.settings = replace(settings, microbatch_turns=micro, kl_coef=0.1)
                if name.startswith("KL reference"):  # the reference as it would be made, outside the timing
                    reinforce.reference = (copy.deepcopy(policy.model).eval().requires_grad_(False)
                                           if name.endswith("adapters") else frozen_reference(reinforce.settings, policy.model))
                began = time.perf_counter()
                with context:
                    if name.startswith("KL reference"):
                        reinforce.reference_kl(case_batch)
                    else:
                        reinforce.step(case_batch)
                best = min(best, time.perf_counter() - began)
            finally:
                TurnBatch.microbatch_rows = original
        direction = {} if name.startswith("KL reference") else gradient_direction(policy.model, reference)
        if name == "by length":
            reference = {key: p.grad.detach().clone() for key, p in policy.model.named_parameters() if p.grad is not None}
        for parameter in trainable:  # every layer's adapters train again for the next row
            parameter.requires_grad_(True)
        if name == "game order":
            base = best
        row = {"setting": name, "microbatch_turns": micro, "update_seconds": round(best, 2),
               "tokens_per_second": round(tokens / best, 1), "tokens_passed": passed,
               "padding_share": round(1 - passed / padded, 3),
               "speed_vs_game_order": round(base / best, 2) if base else None,  # where game order ran first
               **direction}
        print(f"{name:36s} {best:7.1f} s  {row['tokens_per_second']:7.1f} tokens/s  {passed} passed  padding {row['padding_share']:.0%}"
              + (f"  {row['speed_vs_game_order']:.2f}x" if base else "")
              + "".join(f"  {key} {value:.4f}" for key, value in direction.items()), flush=True)
        rows.append(row)
        if args.out:  # at once: a run cut off keeps what it measured
            with open(args.out, "a") as handle:
                handle.write(json.dumps({**machine, **row}) + "\n")
    by_length = next((row for row in rows if row["setting"] == "by length"), None)
    if by_length:
        print(f"sampling {sample_seconds:.1f} s against the update's {by_length['update_seconds']:.1f} s (by length): "
              f"the update is {by_length['update_seconds'] / (sample_seconds + by_length['update_seconds']):.0%} "
              "of an iteration")


if __name__ == "__main__":
    main()
