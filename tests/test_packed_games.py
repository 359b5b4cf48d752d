"""Packed games: each game's turns scored in one forward pass give every turn's own log-probs."""

import copy
import random

import pytest
import torch

from tutorial_lib.lm.policies import Sample
from tutorial_lib.rl.packed_games import games_in_micro_batches, pack_game, pack_games
from tutorial_lib.rl.reinforce import Reinforce, ReinforceSettings
from tutorial_lib.rl.rollout import TurnBatch, action_logprobs, collect

#: float32 rounding of a different summation order through two layers, on log-probs of size ~10
#: (the sharp model's): far below any real misalignment, which moves a log-prob by whole units
ATOL = 1e-4


class WanderingSearcher:
    """Guesses inside the range the feedback left, at random, with real token ids: games of
    several turns whose answers differ in length (no game ends on a format error)."""

    def __init__(self, policy, seed=0):
        self.policy, self.rng = policy, random.Random(seed)

    def act_samples(self, episodes, sampling=None):
        tok, samples = self.policy.tokenizer, []
        for episode in episodes:
            env = episode.env
            text = f"\\boxed{{{self.rng.randint(env.known_low, env.known_high)}}}"
            prompt = tok(self.policy.prompt(episode), add_special_tokens=False).input_ids
            action = tok(text, add_special_tokens=False).input_ids + [tok.eos_token_id]
            samples.append(Sample(text, prompt, action, [0.0] * len(action)))
        return samples


@pytest.fixture(scope="module")
def turns(tiny_policy):
    rollout = collect(WanderingSearcher(tiny_policy), "guess_the_number", range(6),
                      env_options={"preset": None, "low": 1, "high": 50, "max_turns": 7}, num_envs=3, sampling=None)
    assert max(rollout.lengths) >= 4 and len({len(t.action_ids) for t in rollout.turns}) > 1
    return rollout.turns


def scores(model, turns, pad_token_id, packed):
    batch = TurnBatch.of(turns, pad_token_id, packed=packed)
    with torch.no_grad():
        return action_logprobs(model, batch.model_inputs(), with_entropy=True, with_state_hidden=True)


def test_packed_games_give_every_turn_its_own_rows_log_probs(tiny_policy, sharp_model, turns):
    pad = tiny_policy.tokenizer.pad_token_id
    rows, packed = scores(sharp_model, turns, pad, False), scores(sharp_model, turns, pad, True)
    mask = TurnBatch.of(turns, pad).action_mask
    assert rows.logprobs[mask].std() > 0.5  # a peaked model: a misaligned state would show
    torch.testing.assert_close(packed.logprobs, rows.logprobs, atol=ATOL, rtol=0)
    torch.testing.assert_close(packed.entropy, rows.entropy, atol=ATOL, rtol=0)
    torch.testing.assert_close(packed.state_hidden, rows.state_hidden, atol=ATOL, rtol=0)


def test_the_eager_attention_reads_the_packed_mask_too(tiny_policy, sharp_model, turns):
    pad = tiny_policy.tokenizer.pad_token_id
    eager = copy.deepcopy(sharp_model)
    eager.config._attn_implementation = "eager"
    torch.testing.assert_close(scores(eager, turns, pad, True).logprobs, scores(sharp_model, turns, pad, False).logprobs,
                               atol=ATOL, rtol=0)


def test_a_game_passes_its_shared_history_once(tiny_policy, turns):
    pad = tiny_policy.tokenizer.pad_token_id
    per_turn = sum(len(t.prompt_ids) + len(t.action_ids) for t in turns)
    inputs = pack_games(turns, pad, actions=TurnBatch.of(turns, pad).action_mask.shape[1])
    assert inputs["input_ids"].shape[0] == len({t.episode for t in turns})  # a row per game
    packed = sum(len(pack_game([t for t in turns if t.episode == e]).ids) for e in {t.episode for t in turns})
    assert packed < 0.7 * per_turn, (packed, per_turn)
    # no token sees another turn's tail, and every token sees itself
    mask = inputs["attention_mask"][:, 0]
    assert mask.diagonal(dim1=1, dim2=2).all()
    game = pack_game([t for t in turns if t.episode == turns[0].episode])
    for start, end, shared in game.segments[1:]:
        assert not mask[0, start:end, shared:start].any()


def test_the_update_steps_the_same_way_packed(tiny_policy, turns):
    """The gradient of one REINFORCE step: the same, packed or row by row (micro-batches of whole
    games, more than one of them)."""
    pad = tiny_policy.tokenizer.pad_token_id
    advantages = torch.randn(len(turns), generator=torch.Generator().manual_seed(0))
    grads = {}
    for packed in (False, True):
        reinforce = Reinforce(tiny_policy, ReinforceSettings(microbatch_turns=5, pack_games=packed))
        reinforce.optimizer = torch.optim.SGD([p for p in tiny_policy.model.parameters() if p.requires_grad], lr=0.0)
        reinforce.step(TurnBatch.of(turns, pad, packed=packed, advantages=advantages))
        grads[packed] = torch.cat([p.grad.flatten() for p in tiny_policy.model.parameters() if p.grad is not None])
    assert grads[False].norm() > 0
    torch.testing.assert_close(grads[True], grads[False], atol=1e-5 * float(grads[False].abs().max()), rtol=1e-3)


def test_micro_batches_hold_whole_games_and_every_turn_once(turns):
    batches = games_in_micro_batches(turns, size=5)
    assert sorted(row for rows in batches for row in rows) == list(range(len(turns)))
    homes = {}
    for index, rows in enumerate(batches):
        for row in rows:
            homes.setdefault(turns[row].episode, set()).add(index)
    assert all(len(home) == 1 for home in homes.values())
    assert len(batches) > 1 and all(len(rows) <= 5 or len({turns[r].episode for r in rows}) == 1 for rows in batches)


def test_a_turn_without_a_prompt_is_refused():
    class Bare:
        episode, prompt_ids, action_ids = 0, [], [1, 2]

    with pytest.raises(ValueError, match="prompt"):
        pack_game([Bare()])
