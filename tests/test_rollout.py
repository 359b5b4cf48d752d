import copy
import math
import random
import warnings

import pytest
import torch

from tutorial_lib import envs
from tutorial_lib.lm.policies import CACHE_KEYWORD, ExpertPolicy, LanguagePolicy, Sample
from tutorial_lib.rl.rollout import TurnBatch, action_logprobs, collate_turns, collect, token_entropy

#: prompts of very different lengths, so the batch is left-padded
PROMPTS = [
    "Turn 1 of 4. Make your first guess.",
    "Board:",
    "You are playing tic-tac-toe as x. Answer as <move>mark(row,col)</move>. Valid moves: x(1,1) x(2,2)",
    "Now:",
    "Your guess 5 is too low: the number is higher. Turn 2 of 4.",
]


def fresh(tiny_policy, model=None, **options) -> LanguagePolicy:
    """A policy on the shared tiny model with its own preset and seed stream."""
    return LanguagePolicy(model or tiny_policy.model, tiny_policy.tokenizer, **options)


def count_generate_calls(monkeypatch, model) -> list[int]:
    calls = []
    original = model.generate

    def counting_generate(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", counting_generate)
    return calls


def recompute(model, samples, pad_token_id, **options):
    with torch.no_grad():
        return action_logprobs(model, collate_turns(samples, pad_token_id), **options)


# -- one batched generate per turn ------------------------------------------------------------
def test_one_generate_call_per_turn_over_all_live_games(tiny_policy, monkeypatch):
    calls = count_generate_calls(monkeypatch, tiny_policy.model)
    rollout = collect(fresh(tiny_policy, seed=0), "tictactoe", range(4), num_envs=4)
    assert calls[0] == 4  # all four games' first turn in one call
    assert len(calls) == max(rollout.lengths)  # no refill: one call per turn of the longest game
    assert sum(calls) == len(rollout.turns) == sum(rollout.lengths)


def test_finished_games_are_refilled_with_the_next_seed(tiny_policy, monkeypatch):
    calls = count_generate_calls(monkeypatch, tiny_policy.model)
    rollout = collect(fresh(tiny_policy, seed=0), "tictactoe", range(10), num_envs=4)
    assert [r.seed for r in rollout.records] == list(range(10))
    assert calls[0] == 4 and max(calls) == 4
    assert sum(calls) == len(rollout.turns)
    assert len(calls) < len(rollout.turns) / 2  # batched, not one game at a time


# -- the sampler's log-probs ------------------------------------------------------------------
def test_sampled_logprobs_match_a_recompute_of_a_left_padded_batch(tiny_policy, sharp_model):
    tokenizer = tiny_policy.tokenizer
    samples = fresh(tiny_policy, sharp_model, sampling="rl", seed=0).sample(PROMPTS, max_new_tokens=12)
    assert len({len(s.prompt_ids) for s in samples}) == len(PROMPTS)  # really padded
    assert len({len(s.action_ids) for s in samples}) > 1  # actions of different lengths too
    scores = recompute(sharp_model, samples, tokenizer.pad_token_id, with_entropy=True)
    batch = collate_turns(samples, tokenizer.pad_token_id)
    mask = batch["action_mask"]
    torch.testing.assert_close(scores.logprobs, batch["sampler_logprobs"], atol=1e-4, rtol=0)
    assert batch["sampler_logprobs"][mask].std() > 0.5  # a peaked model: not all log-probs alike
    assert (scores.entropy[mask] >= 0).all() and (scores.entropy[~mask] == 0).all()
    assert scores.entropy[mask].max() <= torch.log(torch.tensor(float(sharp_model.config.vocab_size)))


def test_recompute_carries_gradients_for_the_trainer(tiny_policy):
    samples = fresh(tiny_policy, sampling="rl", seed=1).sample(PROMPTS[:3], max_new_tokens=4)
    scores = action_logprobs(tiny_policy.model, collate_turns(samples, tiny_policy.tokenizer.pad_token_id))
    assert scores.logprobs.requires_grad
    tiny_policy.model.zero_grad()
    scores.logprobs.sum().backward()
    assert tiny_policy.model.lm_head.weight.grad.abs().sum() > 0
    tiny_policy.model.zero_grad()


def test_a_measured_entropy_stays_out_of_the_backward_pass(tiny_policy):
    """Without an entropy bonus the entropy is a measurement: the same values, nothing for autograd
    to keep (its full-vocabulary graph was most of the output layer's saved memory), and the
    log-probs' gradient unchanged."""
    from tutorial_lib.runtime.memory_plan import saved_activation_bytes

    samples = fresh(tiny_policy, sampling="rl", seed=2).sample(PROMPTS, max_new_tokens=6)
    batch = collate_turns(samples, tiny_policy.tokenizer.pad_token_id)
    model = tiny_policy.model
    measured = action_logprobs(model, batch, with_entropy=True)
    bonus = action_logprobs(model, batch, with_entropy=True, entropy_gradient=True)
    assert not measured.entropy.requires_grad and bonus.entropy.requires_grad
    assert measured.logprobs.requires_grad
    torch.testing.assert_close(measured.entropy, bonus.entropy.detach(), atol=0, rtol=0)
    kept = {name: saved_activation_bytes(model, lambda options=options: action_logprobs(model, batch, **options))
            for name, options in (("none", {}), ("measured", dict(with_entropy=True)),
                                  ("bonus", dict(with_entropy=True, entropy_gradient=True)))}
    assert kept["measured"] == kept["none"] < kept["bonus"]
    gradients = []
    for scores in (measured, action_logprobs(model, batch)):
        model.zero_grad()
        scores.logprobs.sum().backward()
        gradients.append(model.lm_head.weight.grad.clone())
    model.zero_grad()
    torch.testing.assert_close(gradients[0], gradients[1], atol=0, rtol=0)


def test_entropy_is_exact_and_its_gradient_finite_when_a_probability_underflows():
    # a gap of 300 nats: exp underflows to exactly 0 in float32 (a pretrained model's logits at
    # temperature 0.5 reach such gaps); -inf: a token masked out
    logits = torch.tensor([[0.0, 0.0, -300.0, float("-inf")], [1.0, 1.0, 1.0, 1.0]], requires_grad=True)
    entropy = token_entropy(logits.log_softmax(-1))
    assert entropy.tolist() == pytest.approx([math.log(2), math.log(4)])
    (0.0 * entropy.sum()).backward()  # an entropy coefficient of 0 must leave the gradient finite
    assert torch.isfinite(logits.grad).all()


def test_position_ids_matter_for_absolute_but_not_rotary_positions(tiny_policy):
    """generate numbers a left-padded row's positions from its first real token. A forward pass
    without position_ids numbers them from column 0: GPT-2 (absolute position embeddings) then
    scores padded rows differently; Llama (rotary) does not, as only position *differences* enter
    its attention scores."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = tiny_policy.tokenizer
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=256, initializer_range=0.2,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    gpt2 = GPT2LMHeadModel(config).eval()
    for model, position_ids_matter in ((gpt2, True), (tiny_policy.model, False)):
        samples = fresh(tiny_policy, model, sampling="rl", seed=0).sample(PROMPTS, max_new_tokens=6)
        batch = collate_turns(samples, tokenizer.pad_token_id)
        with torch.no_grad():
            right = action_logprobs(model, batch).logprobs
            output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        targets = batch["input_ids"][:, -6:]
        shifted = output.logits[:, -7:-1].log_softmax(-1).gather(-1, targets[..., None])[..., 0]
        shifted = shifted.masked_fill(~batch["action_mask"], 0.0)
        torch.testing.assert_close(right, batch["sampler_logprobs"], atol=1e-4, rtol=0)
        gap = (shifted - batch["sampler_logprobs"]).abs().max().item()
        assert (gap > 0.1) if position_ids_matter else (gap < 1e-4), (type(model).__name__, gap)


def test_recorded_logprobs_are_of_the_distribution_sampled_from(tiny_policy, sharp_model):
    """With top-k / top-p the sampler renormalises over the kept tokens: its log-prob of a kept
    token is above the full temperature-scaled distribution's, which the trainer recomputes."""
    samples = fresh(tiny_policy, sharp_model, sampling="standard", seed=0).sample(PROMPTS, max_new_tokens=8)
    recorded = collate_turns(samples, tiny_policy.tokenizer.pad_token_id)["sampler_logprobs"]
    full = recompute(sharp_model, samples, tiny_policy.tokenizer.pad_token_id, temperature=0.7).logprobs
    assert (recorded >= full - 1e-5).all()
    assert (recorded - full).max() > 1e-3


def test_action_ids_stop_at_the_first_eos_and_exclude_padding(tiny_policy, sharp_model):
    tokenizer = tiny_policy.tokenizer
    samples = fresh(tiny_policy, sharp_model, sampling="rl", seed=2).sample(PROMPTS * 2, max_new_tokens=12)
    lengths = [len(s.action_ids) for s in samples]
    assert min(lengths) < 12 and max(lengths) == 12  # some stopped early, others ran to the limit
    for prompt, sample in zip(PROMPTS * 2, samples):
        assert sample.prompt_ids == tokenizer(prompt, add_special_tokens=False)["input_ids"]
        assert tokenizer.pad_token_id not in sample.action_ids
        assert tokenizer.eos_token_id not in sample.action_ids[:-1]
        assert len(sample.action_ids) == 12 or sample.action_ids[-1] == tokenizer.eos_token_id
        assert len(sample.logprobs) == len(sample.action_ids)
        assert sample.text == tokenizer.decode(sample.action_ids, skip_special_tokens=True)


# -- episodes ---------------------------------------------------------------------------------
def test_rollout_turns_agree_with_a_replay_in_the_game(tiny_policy):
    rollout = collect(fresh(tiny_policy, seed=0), "tictactoe", range(6), num_envs=3)
    env = envs.make("tictactoe")
    for index, record in enumerate(rollout.records):
        turns = [t for t in rollout.turns if t.episode == index]
        assert [t.turn for t in turns] == list(range(record.length)) and record.length > 1
        assert [t.last for t in turns] == [False] * (record.length - 1) + [True]
        env.reset(seed=record.seed)
        rewards = []
        for turn, sample in zip(turns, record.samples):
            _, reward, terminated, truncated, info = env.step(sample.text)
            assert (turn.reward, turn.invalid) == (reward, info["invalid_action"])
            assert (turn.terminated, turn.truncated) == (terminated, truncated)
            rewards.append(reward)
        assert env.done and rollout.returns[index] == sum(rewards)
    summary = rollout.summary()
    assert summary["turns"] == sum(rollout.lengths) == len(rollout.turns)
    assert summary["action_tokens"] == sum(len(t.action_ids) for t in rollout.turns)
    assert summary["invalid_rate"] == sum(t.invalid for t in rollout.turns) / len(rollout.turns)


class RandomGuesser:
    """Random well-formed guesses, as samples with placeholder token ids: enough to check the
    engine's bookkeeping when the tiny model cannot write a parseable answer."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act_samples(self, episodes, *, sampling=None):
        return [Sample(e.env.random_action(self.rng), [1], [2], [-1.0]) for e in episodes]


def test_the_games_flags_reach_the_turns_as_the_game_returned_them():
    # GuessTheNumber (GEM's rules) ends every episode: a correct guess terminates it, running out
    # of turns terminates it *and* flags it as cut off by the limit
    rollout = collect(RandomGuesser(0), "guess_the_number", range(40), env_options={"max_turns": 2}, num_envs=8)
    kinds = set()
    for index, record in enumerate(rollout.records):
        last = [t for t in rollout.turns if t.episode == index][-1]
        assert (last.terminated, last.truncated) == (record.terminated, record.truncated)
        assert record.terminated
        if record.truncated:  # turns ran out: partial reward, no success
            assert record.length == 2 and not record.success and 0 <= last.reward <= 1
        else:  # a correct guess is the only way an episode of parseable guesses ends early
            assert record.success and last.reward == 1.0
        kinds.add("truncated" if record.truncated else "won")
        assert not any(t.terminated or t.truncated for t in rollout.turns if t.episode == index and not t.last)
    assert kinds == {"truncated", "won"}
    assert 0 < rollout.summary()["truncated_rate"] < 1


def test_seeded_policies_reproduce_rollouts(tiny_policy):
    def play(seed):
        turns = collect(fresh(tiny_policy, seed=seed), "tictactoe", range(3), num_envs=2).turns
        return [(t.action_ids, t.logprobs, t.reward) for t in turns]

    assert play(7) == play(7)
    assert play(7) != play(8)


def test_collect_samples_with_its_preset_and_leaves_the_policys_alone(tiny_policy):
    policy = fresh(tiny_policy, sampling="greedy", seed=0)
    first = collect(policy, "guess_the_number", range(4), num_envs=4)
    second = collect(policy, "guess_the_number", range(4), num_envs=4)
    # one seeded generate per turn; the untrained model never writes \boxed{N}: one turn each
    assert policy.sampling == "greedy" and policy.seed == 2
    assert [t.action_ids for t in first.turns] != [t.action_ids for t in second.turns]  # sampled
    greedy = [collect(policy, "guess_the_number", range(4), sampling=None).turns for _ in range(2)]
    assert [t.action_ids for t in greedy[0]] == [t.action_ids for t in greedy[1]]


def test_collect_needs_a_policy_with_samples():
    with pytest.raises(TypeError, match="act_samples"):
        collect(ExpertPolicy(), "math", range(2))


def test_collate_lays_out_actions_right_aligned():
    turns = [Sample("", [5, 6, 7], [8, 9], [-0.5, -0.25]), Sample("", [5], [8], [-1.0])]
    batch = collate_turns(turns, pad_token_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9], [0, 0, 0, 5, 8]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 4], [0, 0, 0, 0, 1]]
    assert batch["action_mask"].tolist() == [[True, True], [False, True]]
    assert batch["sampler_logprobs"].tolist() == [[-0.5, -0.25], [0.0, -1.0]]
    with pytest.raises(ValueError, match="no turns"):
        collate_turns([], pad_token_id=0)


def test_a_turn_batch_selects_rows_laid_out_as_collating_them_would():
    turns = [Sample("", [5, 6, 7], [8, 9, 10], [-0.5, -0.25, -0.1]), Sample("", [5], [8], [-1.0]),
             Sample("", [5, 6], [8, 9], [-0.2, -0.3])]
    batch = TurnBatch.of(turns, 0, advantages=torch.tensor([1.0, 2.0, 3.0]))
    assert len(batch) == 3 and batch.action_tokens == 6 and batch.action_mask.shape == (3, 3)
    picked = batch.select([2, 1])  # longest action among them: 2 tokens, so 2 columns
    alone = collate_turns([turns[2], turns[1]], pad_token_id=0)
    assert torch.equal(picked.action_mask, alone["action_mask"])
    assert torch.equal(picked.sampler_logprobs, alone["sampler_logprobs"])
    assert picked.advantages.tolist() == [3.0, 2.0] and picked.old_values is None
    assert torch.equal(picked.model_inputs()["input_ids"], alone["input_ids"])
    pieces = list(batch.split(2))  # by length: turns of 2 and 4 tokens together, the 6-token one alone
    assert [p.turns for p in pieces] == [[turns[1], turns[2]], [turns[0]]]
    assert sum(p.action_tokens for p in pieces) == batch.action_tokens
    assert [p.advantages.tolist() for p in pieces] == [[2.0, 3.0], [1.0]]


def test_widths_rounded_to_a_multiple_pad_on_the_left_and_score_the_same(tiny_policy, sharp_model):
    """XLA compiles a graph per shape, so there batches are padded to a few widths
    (``multiple``): the padding is masked, so every action token scores as without it."""
    turns = [Sample("", [5, 6, 7], [8, 9], [-0.5, -0.25]), Sample("", [5], [8], [-1.0])]
    padded = collate_turns(turns, pad_token_id=0, multiple=4)
    assert padded["input_ids"].tolist() == [[0, 0, 0, 5, 6, 7, 8, 9], [0, 0, 0, 0, 0, 0, 5, 8]]  # 5 -> 8 columns
    assert padded["action_mask"].tolist() == [[False, False, True, True], [False, False, False, True]]  # 2 -> 4
    assert padded["position_ids"][1].tolist()[-2:] == [0, 1]
    # a width of actions that fills the multiple still leaves the column that predicts the first one
    assert collate_turns([Sample("", [5], [8, 9, 10, 11], [-1.0] * 4)], 0, multiple=4)["input_ids"].shape == (1, 8)
    batch = TurnBatch.of(turns, 0, multiple=4, advantages=torch.tensor([1.0, 2.0]))
    assert batch.select([1]).action_mask.shape == (1, 4) and batch.select([1]).multiple == 4
    assert torch.equal(batch.select([1, 0]).model_inputs()["input_ids"], collate_turns(turns[::-1], 0, multiple=4)["input_ids"])

    samples = fresh(tiny_policy, sharp_model, sampling="rl", seed=0).sample(PROMPTS, max_new_tokens=12)
    pad = tiny_policy.tokenizer.pad_token_id
    with torch.no_grad():
        plain = action_logprobs(sharp_model, collate_turns(samples, pad)).logprobs
        wide = action_logprobs(sharp_model, collate_turns(samples, pad, multiple=32)).logprobs
    # the same positions and keys (padding is masked out of attention), summed in another layout: float32 rounding
    assert torch.allclose(wide[:, -plain.shape[1]:], plain, atol=1e-5)
    assert not wide[:, : -plain.shape[1]].any()


def test_micro_batches_group_turns_of_like_length_so_little_is_padding():
    # a game's turns in order: each prompt holds the history before it, so they grow
    games = [[Sample("", [1] * (10 * t), [2, 3], [-0.1, -0.2]) for t in range(1, 5)] for _ in range(2)]
    batch = TurnBatch.of([turn for game in games for turn in game], 0)
    padded = sum(p.model_inputs()["input_ids"].numel() for p in batch.split(2))
    real = sum(len(t.prompt_ids) + len(t.action_ids) for t in batch.turns)
    assert padded == real  # equal lengths side by side: no padding at all
    in_game_order = sum(collate_turns(batch.turns[i : i + 2], 0)["input_ids"].numel() for i in range(0, 8, 2))
    assert in_game_order > real
    assert sorted(int(i) for rows in batch.microbatch_rows(3) for i in rows) == list(range(8))


# -- prefix sharing ---------------------------------------------------------------------------
SHARED = "You are playing a game against an opponent. Read the board, then answer with one move. " * 2
#: two versions of a long start (the mark, early on), as in tic-tac-toe: each is computed once
PREFIXED_PROMPTS = [
    f"You are {mark}. " + SHARED + tail
    for mark, tail in [("x", "Board: x."), ("o", "Board: o . x . o, your move now"), ("x", "Go!"), ("o", "Board:")]
]


def generate_kwargs(monkeypatch, model) -> list[dict]:
    seen = []
    original = model.generate

    def recording_generate(*args, **kwargs):
        cache = kwargs.get(CACHE_KEYWORD)  # generate extends it in place: note its length now
        seen.append({**kwargs, "cached": cache.get_seq_length() if cache is not None else 0})
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", recording_generate)
    return seen


def test_a_shared_prompt_start_is_computed_once_and_changes_nothing(tiny_policy, sharp_model, monkeypatch):
    seen = generate_kwargs(monkeypatch, sharp_model)
    shared = fresh(tiny_policy, sharp_model, sampling="rl", seed=0).sample(PREFIXED_PROMPTS, max_new_tokens=10)
    plain = fresh(tiny_policy, sharp_model, sampling="rl", seed=0, share_prefix=False).sample(
        PREFIXED_PROMPTS, max_new_tokens=10
    )
    cached = seen[0]["cached"]
    assert cached >= 16 and seen[1]["cached"] == 0  # the first call shared its prompts' start
    assert seen[0]["attention_mask"][:, :cached].all()  # the prefix comes first, in every row
    assert [s.prompt_ids for s in shared] == [s.prompt_ids for s in plain]  # unpadded, in order
    assert [s.action_ids for s in shared] == [s.action_ids for s in plain]  # same draws
    for a, b in zip(shared, plain):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)
    # and the trainer's recompute of the full prompts agrees with what the sampler recorded
    batch = collate_turns(shared, tiny_policy.tokenizer.pad_token_id)
    scores = recompute(sharp_model, shared, tiny_policy.tokenizer.pad_token_id)
    torch.testing.assert_close(scores.logprobs, batch["sampler_logprobs"], atol=1e-4, rtol=0)


def test_sampling_with_a_shared_prefix_logs_no_deprecation(tiny_policy, sharp_model):
    """A transformers release that renamed the cache keyword logs a line for the old name, once per
    process: it printed into every chapter that samples."""
    import logging

    from transformers.utils import logging as hf_logging

    hf_logging.warning_once.cache_clear()  # a line already logged in this process would not be logged again
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        fresh(tiny_policy, sharp_model, sampling="greedy").sample(PREFIXED_PROMPTS, max_new_tokens=3)
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in records if "deprecated" in r.getMessage()] == []


def test_prefix_sharing_keeps_positions_for_absolute_position_embeddings(tiny_policy):
    """Padding sits between the shared start and each row's rest; a GPT-2 (absolute positions)
    must still see each real token at its unpadded position."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = tiny_policy.tokenizer
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=256, initializer_range=0.2,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    gpt2 = GPT2LMHeadModel(config).eval()
    shared = fresh(tiny_policy, gpt2, sampling="greedy").sample(PREFIXED_PROMPTS, max_new_tokens=6)
    alone = [fresh(tiny_policy, gpt2, sampling="greedy").sample([p], max_new_tokens=6)[0] for p in PREFIXED_PROMPTS]
    assert [s.action_ids for s in shared] == [s.action_ids for s in alone]
    for a, b in zip(shared, alone):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)


def test_prefix_sharing_works_through_a_lora_wrapper(tiny_policy):
    from peft import LoraConfig, get_peft_model

    with warnings.catch_warnings():  # peft 0.21 calls an API transformers 5 renamed (as in models.py)
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        model = get_peft_model(copy.deepcopy(tiny_policy.model), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    shared = fresh(tiny_policy, model, sampling="greedy").sample(PREFIXED_PROMPTS, max_new_tokens=5)
    plain = fresh(tiny_policy, model, sampling="greedy", share_prefix=False).sample(PREFIXED_PROMPTS, max_new_tokens=5)
    assert [s.action_ids for s in shared] == [s.action_ids for s in plain]
