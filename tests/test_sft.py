import json
import os

import pytest
import torch

from tutorial_lib.data.expert_data import expert_examples
from tutorial_lib.data.sft import (
    STAGED_RUN,
    LengthBatches,
    SFTSettings,
    completion_logits,
    staged_run_writer,
    tokenize_examples,
    train_sft,
)
from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.evaluate import summarize
from tutorial_lib.lm.models import load_policy
from tutorial_lib.lm.tokenization import IGNORE_INDEX, collate_examples
from tutorial_lib.runtime.durable import is_complete

from .conftest import SMALL


@pytest.fixture(scope="module")
def gtn_examples():
    return expert_examples("guess_the_number", range(40))


def test_tokenized_examples_mask_the_prompt(tiny_policy, gtn_examples):
    dataset = tokenize_examples(tiny_policy.tokenizer, gtn_examples[:3])
    for row, example in zip(dataset, gtn_examples[:3]):
        trained = [t for t in row["labels"] if t != IGNORE_INDEX]
        assert tiny_policy.tokenizer.decode(trained, skip_special_tokens=True) == example["completion"]
        assert trained[-1] == tiny_policy.tokenizer.eos_token_id


def test_sft_learns_the_answer_format_and_reloads(tiny_cache, gtn_examples, tmp_path):
    policy = load_policy("tiny", tiny_config=SMALL)
    before = summarize(run_episodes("guess_the_number", policy, range(16), batch_size=16))
    settings = SFTSettings(epochs=25, learning_rate=1e-2, batch_size=16, logging_steps=2, report_to="none")
    result = train_sft(policy, gtn_examples, settings, output_dir=tmp_path / "sft")
    losses = [loss for _, loss in result.losses]
    assert losses[-1] < losses[0] / 3
    after = summarize(run_episodes("guess_the_number", policy, range(16), batch_size=16))
    assert before["invalid_rate"] > 0.9 and after["invalid_rate"] < before["invalid_rate"]
    reloaded = load_policy(str(tmp_path / "sft"))
    prompt = ["<|user|>\nGuess.<|end|>\n<|assistant|>\n"]
    assert reloaded.generate(prompt, max_new_tokens=6) == policy.generate(prompt, max_new_tokens=6)
    saved = json.loads((tmp_path / "sft" / "sft_result.json").read_text())
    assert saved["examples"] == len(gtn_examples) and saved["log_history"]


def test_lora_sft_trains_only_adapters(tiny_cache, gtn_examples, tmp_path):
    policy = load_policy("tiny", tiny_config=SMALL, lora={"r": 4, "lora_alpha": 8})
    frozen = {n: p.detach().clone() for n, p in policy.model.named_parameters() if not p.requires_grad}
    train_sft(policy, gtn_examples[:32], SFTSettings(epochs=1, batch_size=8, report_to="none"), output_dir=tmp_path / "lora")
    assert all((p == frozen[n]).all() for n, p in policy.model.named_parameters() if n in frozen)
    assert (tmp_path / "lora" / "adapter_config.json").exists()
    reloaded = load_policy(str(tmp_path / "lora"))
    assert reloaded.generate(["Guess."], max_new_tokens=3) == policy.generate(["Guess."], max_new_tokens=3)


def test_sft_without_progress_prints_nothing_per_step(tiny_cache, gtn_examples, tmp_path, capsys):
    """With its bar off the Trainer would print every log dict (a chapter's worth of lines); the
    losses must still be recorded."""
    policy = load_policy("tiny", tiny_config=SMALL)
    settings = SFTSettings(epochs=1, batch_size=8, logging_steps=1, report_to="none", progress=False)
    result = train_sft(policy, gtn_examples[:32], settings, output_dir=tmp_path / "quiet")
    out = capsys.readouterr()
    assert "'loss'" not in out.out + out.err and "Truncating" not in out.err, out
    assert len(result.losses) == 4


def test_completion_only_loss_equals_the_full_forward_loss(tiny_policy, gtn_examples):
    """The output layer at the labelled positions only gives exactly the model's own loss."""
    import torch

    dataset = tokenize_examples(tiny_policy.tokenizer, gtn_examples[:6])
    rows = [{"input_ids": r["input_ids"], "attention_mask": [1] * len(r["input_ids"]), "labels": r["labels"]}
            for r in dataset]
    batch = collate_examples(rows, tiny_policy.tokenizer.pad_token_id)
    with torch.no_grad():
        full = tiny_policy.model(**batch).loss
        logits, targets = completion_logits(tiny_policy.model, batch)
        ours = torch.nn.functional.cross_entropy(logits, targets)
    assert targets.numel() == int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
    # float32, two batch shapes for the output layer, then a mean of positive per-token losses (~6): no
    # cancellation, a few ulps (seen: 1); rel 1e-5 is ~130 ulps
    assert float(ours) == pytest.approx(float(full), rel=1e-5)


def test_group_by_length_cuts_the_padding(tiny_cache, gtn_examples, tmp_path):
    """GuessTheNumber prompts grow with the turns (78-161 tokens): batches drawn at random are
    partly padding, batches of similar lengths much less; the same examples are trained on."""
    results = {}
    for groups in (0, 50):
        policy = load_policy("tiny", tiny_config=SMALL)
        settings = SFTSettings(epochs=1, batch_size=8, report_to="none", progress=False, group_by_length=groups)
        results[groups] = train_sft(policy, gtn_examples, settings, output_dir=tmp_path / str(groups))
    assert results[0].padding_fraction > 0.1
    assert results[50].padding_fraction < results[0].padding_fraction / 4
    assert results[50].examples == results[0].examples == len(gtn_examples)
    saved = json.loads((tmp_path / "50" / "sft_result.json").read_text())
    assert saved["padding_fraction"] == results[50].padding_fraction


def _weights(policy):
    return {name: p.detach().clone() for name, p in policy.model.named_parameters()}


def test_micro_batches_give_the_same_update_with_less_padding(tiny_cache, gtn_examples, tmp_path):
    """One optimiser step on 16 examples, whole or cut into 4 micro-batches of similar length: the
    same weights after it (the loss is normalised by the step's completion tokens, not per
    micro-batch), from far less padding."""
    import torch

    start = _weights(load_policy("tiny", tiny_config=SMALL))
    weights, results = {}, {}
    for micro in (1, 4):
        policy = load_policy("tiny", tiny_config=SMALL)
        # plain SGD: Adam's first step is about lr * sign(gradient), which float rounding flips
        # wherever a gradient is near zero
        settings = SFTSettings(epochs=1, batch_size=16, micro_batches=micro, optim="sgd", learning_rate=1.0,
                               warmup_ratio=0.0, lr_scheduler="constant", logging_steps=1, report_to="none",
                               progress=False)
        results[micro] = train_sft(policy, gtn_examples[:16], settings, output_dir=tmp_path / str(micro))
        weights[micro] = _weights(policy)
    assert len(results[4].losses) == len(results[1].losses) == 1  # one optimiser step each
    assert any(not torch.equal(weights[1][n], start[n]) for n in start)  # a real update
    # float32 gradients from other batch shapes and sums: rtol 1e-4 of each update, atol 1e-7 for entries
    # where the update's terms cancel (seen: <6% of the bound)
    for name in start:  # the updates themselves, not weights that barely moved
        torch.testing.assert_close(weights[4][name] - start[name], weights[1][name] - start[name], rtol=1e-4, atol=1e-7)
    assert results[4].padding_fraction < results[1].padding_fraction / 2


def test_merged_duplicates_train_what_the_repeated_examples_train(tiny_cache, gtn_examples, tmp_path):
    """GuessTheNumber's binary search repeats its examples: one SGD step over the distinct ones, each
    weighted by its count, is the step over all of them (the loss is per completion token)."""
    import torch

    policy = load_policy("tiny", tiny_config=SMALL)
    data = gtn_examples[:12]
    merged = tokenize_examples(policy.tokenizer, data, merge_duplicates=True)
    distinct = {(e["prompt"], e["completion"]) for e in data}
    assert len(merged) == len(distinct) < len(data) and sum(merged["weight"]) == len(data)
    assert merged[0]["input_ids"] == tokenize_examples(policy.tokenizer, data[:1])[0]["input_ids"]  # first seen first
    # counts that differ: merged rows left unweighted would be another loss, which this test would see
    assert len(set(merged["weight"])) > 1
    start = _weights(policy)
    weights, results = {}, {}
    for merge in (False, True):
        policy = load_policy("tiny", tiny_config=SMALL)
        settings = SFTSettings(epochs=1, batch_size=16, merge_duplicates=merge, optim="sgd", learning_rate=1.0,
                               warmup_ratio=0.0, lr_scheduler="constant", logging_steps=1, report_to="none",
                               progress=False)
        results[merge] = train_sft(policy, data, settings, output_dir=tmp_path / str(merge))
        weights[merge] = _weights(policy)
    assert len(results[True].losses) == len(results[False].losses) == 1  # one optimiser step each
    assert results[True].distinct_examples == len(distinct) and results[False].distinct_examples == len(data)
    assert results[True].examples == results[False].examples == len(data)
    assert results[True].trained_tokens == results[False].trained_tokens
    assert results[True].losses[0][1] == pytest.approx(results[False].losses[0][1], rel=1e-5)  # a mean of ~50 terms
    assert any(not torch.equal(weights[False][n], start[n]) for n in start)  # a real update
    # as for micro-batches: float32 gradients summed in other orders (rtol 1e-4 of each update)
    for name in start:
        torch.testing.assert_close(weights[True][name] - start[name], weights[False][name] - start[name],
                                   rtol=1e-4, atol=1e-7)


def test_merged_duplicates_need_one_micro_batch_per_step(tiny_cache, gtn_examples, tmp_path):
    with pytest.raises(ValueError, match="merge_duplicates"):
        SFTSettings(merge_duplicates=True, micro_batches=4)
    settings = SFTSettings(merge_duplicates=True, report_to="none", progress=False)
    settings.gradient_accumulation_steps = 8  # changed after it was made: checked again when it trains
    with pytest.raises(ValueError, match="merge_duplicates"):
        train_sft(load_policy("tiny", tiny_config=SMALL), gtn_examples[:8], settings, output_dir=tmp_path / "bad")


def test_micro_batches_follow_the_data_order_seed(tiny_cache, gtn_examples, tmp_path):
    import torch

    def train(seed, name):
        policy = load_policy("tiny", tiny_config=SMALL)
        settings = SFTSettings(epochs=1, batch_size=8, micro_batches=2, seed=seed, report_to="none", progress=False)
        train_sft(policy, gtn_examples[:48], settings, output_dir=tmp_path / name)
        return _weights(policy)

    first, again, other = train(0, "a"), train(0, "b"), train(1, "c")
    assert all(torch.equal(first[n], again[n]) for n in first)
    assert any(not torch.equal(first[n], other[n]) for n in first)
    with pytest.raises(ValueError, match="divide batch_size"):
        SFTSettings(batch_size=16, micro_batches=3)
    with pytest.raises(ValueError, match="not both"):
        SFTSettings(micro_batches=2, group_by_length=50)
    with pytest.raises(ValueError, match="share of the steps"):
        SFTSettings(warmup_ratio=1.0)


def test_length_batches_cover_every_example_once_in_batches_of_similar_length_and_random_order():
    import random

    import torch

    rng = random.Random(0)
    lengths = [rng.randrange(100, 500) for _ in range(203)]
    sampler = LengthBatches(lengths, batch_size=8, group_batches=5)
    torch.manual_seed(0)
    order = list(sampler)
    assert sorted(order) == list(range(203)) and len(sampler) == 203
    batches = [order[i:i + 8] for i in range(0, len(order), 8)]
    assert [len(b) for b in batches] == [8] * 25 + [3]  # the short batch last, so none straddles two
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    shuffled = list(range(203))
    rng.shuffle(shuffled)
    random_spread = sum(max(lengths[i] for i in shuffled[k:k + 8]) - min(lengths[i] for i in shuffled[k:k + 8])
                        for k in range(0, 203, 8)) / 26
    assert spread < random_spread / 3
    # not longest-to-shortest (or the reverse) within a group: batch order is shuffled
    means = [sum(lengths[i] for i in b) / len(b) for b in batches[:25]]
    steps = [b > a for a, b in zip(means, means[1:])]
    assert 5 < sum(steps) < 19
    assert list(sampler) != order  # a new draw each epoch
    with pytest.raises(ValueError, match="batch_size"):
        LengthBatches(lengths, batch_size=0)


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_a_run_in_stages_trains_what_one_call_trains(tiny_cache, gtn_examples, tmp_path, micro_batches):
    """Three parts of a run, each resumed from the last one's checkpoint, end at the weights one
    call reaches: same data order across epochs, same optimiser state, same (cosine) schedule."""
    import torch

    settings = SFTSettings(epochs=3, batch_size=8, micro_batches=micro_batches, lr_scheduler="cosine",
                           warmup_ratio=0.1, logging_steps=1, report_to="none", progress=False)
    whole_policy = load_policy("tiny", tiny_config=SMALL)
    whole = train_sft(whole_policy, gtn_examples[:40], settings, output_dir=tmp_path / "whole")
    staged_dir = tmp_path / "staged"
    with pytest.raises(FileNotFoundError, match="run stage 1 first"):
        train_sft(load_policy("tiny", tiny_config=SMALL), gtn_examples[:40], settings, output_dir=staged_dir, stage=(2, 3))
    parts, writers = [], []
    for i in (1, 2, 3):
        parts.append(train_sft(load_policy("tiny", tiny_config=SMALL), gtn_examples[:40], settings,
                               output_dir=staged_dir, stage=(i, 3)))
        writers.append(staged_run_writer(staged_dir))  # between parts, the folder names who trains it
    assert [p.finished for p in parts] == [False, False, True]
    assert [(w["pid"], w["parts_done"], w["parts"]) for w in writers[:2]] == [(os.getpid(), 1, 3), (os.getpid(), 2, 3)]
    assert writers[2] is None and not (staged_dir / STAGED_RUN).exists()  # gone before the seal
    assert is_complete(staged_dir)
    assert [p.step for p in parts] == [5, 10, 15] and whole.step == whole.total_steps == 15
    assert json.loads((staged_dir / "sft_result.json").read_text())["examples"] == 40
    assert not list(staged_dir.glob("checkpoint-*"))  # the finished run keeps only its model
    staged = load_policy(str(staged_dir))
    for name, weight in whole_policy.model.named_parameters():
        torch.testing.assert_close(dict(staged.model.named_parameters())[name], weight)
    assert [loss for _, loss in parts[-1].losses] == pytest.approx([loss for _, loss in whole.losses], rel=1e-5)
    assert parts[-1].seconds > parts[0].seconds  # the time adds up over the parts
    with pytest.raises(ValueError, match="stage must be"):
        train_sft(whole_policy, gtn_examples[:40], settings, output_dir=tmp_path / "x", stage=(4, 3))


def test_a_checkpoint_moved_with_its_cache_is_complete_and_loads_where_it_lands(tiny_cache, gtn_examples, tmp_path):
    """book/setup.md tells a notebook reader to keep the cache on Drive, mounted wherever the next runtime
    mounts it: a checkpoint must not depend on the folder it was written in."""
    import shutil

    from tutorial_lib.runtime.durable import recover

    policy = load_policy("tiny", tiny_config=SMALL)
    settings = SFTSettings(epochs=1, batch_size=8, report_to="none")
    train_sft(policy, gtn_examples[:16], settings, output_dir=tmp_path / "here" / "sft" / "game-key")
    shutil.move(tmp_path / "here", tmp_path / "there")
    moved = tmp_path / "there" / "sft" / "game-key"
    assert not (tmp_path / "here").exists()
    assert recover(moved)  # what sft_policy asks before loading instead of training again
    prompt = ["<|user|>\nGuess.<|end|>\n<|assistant|>\n"]
    assert load_policy(str(moved)).generate(prompt, max_new_tokens=6) == policy.generate(prompt, max_new_tokens=6)


def test_sft_pads_to_a_few_lengths_only_for_a_model_on_xla(tmp_path):
    from tutorial_lib.data.sft import sft_config
    from tutorial_lib.runtime.device import XLA_SHAPE_MULTIPLE

    settings = SFTSettings(epochs=1, report_to="none")
    assert sft_config(settings, tmp_path, torch.device("xla")).pad_to_multiple_of == XLA_SHAPE_MULTIPLE
    assert sft_config(settings, tmp_path, torch.device("cpu")).pad_to_multiple_of != XLA_SHAPE_MULTIPLE
    mine = SFTSettings(epochs=1, report_to="none", extra={"pad_to_multiple_of": 8})  # the user's choice wins
    assert sft_config(mine, tmp_path, torch.device("xla")).pad_to_multiple_of == 8
