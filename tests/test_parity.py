"""Chapter 8's parity checks: a policy rebuilds the SFT data's prompts, and a turn whose text,
tokenised again, gives other ids than the sampler drew is caught and named."""

import pytest

from tutorial_lib.data.expert_data import (
    counterfactual_recipes,
    expert_examples,
    recipe_permutations,
    rewrite_recipe,
)
from tutorial_lib.evaluation.parity import (
    TurnLogRatio,
    log_ratios,
    prompt_parity,
    ratio_row,
    retokenised,
    why_different,
)
from tutorial_lib.lm.policies import LanguagePolicy, Sample
from tutorial_lib.rl.rollout import turn_logprobs

#: a small CookingWorld world, so that the expert's games are short
WORLD = dict(num_locations=1, num_ingredients=1, num_distractor_items=1)
DATA_WORLD = {**WORLD, "fold": "train"}  # the SFT data's games are train-fold games
GAMES = [0, 1]


def sample_of(tokenizer, action_ids, logprobs=None):
    """A turn as the sampler records it: the text decoded from ``action_ids``, special tokens dropped."""
    return Sample(tokenizer.decode(action_ids, skip_special_tokens=True), [], list(action_ids),
                  logprobs if logprobs is not None else [0.0] * len(action_ids))


def spellings(tokenizer, text):
    """``text``'s canonical ids, and the same text spelled one character per token (another spelling)."""
    canonical = tokenizer(text, add_special_tokens=False)["input_ids"]
    by_character = [i for ch in text for i in tokenizer(ch, add_special_tokens=False)["input_ids"]]
    assert by_character != canonical and tokenizer.decode(by_character) == text  # the premise of the tests
    return canonical, by_character


# --- why the ids differ -----------------------------------------------------------------------------

def test_retokenised_is_the_text_encoded_with_end_of_turn(tiny_policy):
    tokenizer = tiny_policy.tokenizer
    eos = tokenizer.eos_token_id
    canonical, by_character = spellings(tokenizer, "take knife")
    for ids in (canonical, canonical + [eos], by_character, by_character + [eos]):
        assert retokenised(sample_of(tokenizer, ids), tokenizer) == canonical + [eos]


def test_why_different_names_each_reason(tiny_policy):
    tokenizer = tiny_policy.tokenizer
    eos = tokenizer.eos_token_id
    canonical, by_character = spellings(tokenizer, "take knife")
    special = next(i for i in tokenizer.all_special_ids if i != eos)
    lone_byte = tokenizer.convert_tokens_to_ids("Ã")  # 0xC3, the first byte of a two-byte character, alone
    assert lone_byte != tokenizer.unk_token_id
    cases = {
        "same tokens": canonical + [eos],
        # without the token limit, a missing end-of-turn is not called a cut
        "no end-of-turn token (as a cut at the token limit gives), only end-of-turn added": canonical,
        "no end-of-turn token (as a cut at the token limit gives), and re-spelled": by_character,
        "special token inside the action": canonical + [special, eos],  # a stray one just before the end
        "bytes that are not UTF-8": [lone_byte] + canonical + [eos],
        "re-spelled: same text, other tokens": by_character + [eos],
    }
    for reason, ids in cases.items():
        sample = sample_of(tokenizer, ids)
        assert sample.text == ("\ufffd" if reason == "bytes that are not UTF-8" else "") + "take knife"
        assert why_different(sample, tokenizer) == reason, ids


def test_an_action_is_called_cut_only_if_it_reached_the_token_limit(tiny_policy):
    tokenizer = tiny_policy.tokenizer
    canonical, by_character = spellings(tokenizer, "take knife")
    for ids, added in ((canonical, "only end-of-turn added"), (by_character, "and re-spelled")):
        sample = sample_of(tokenizer, ids)
        # as long as the limit (or longer): the sampler was stopped by the limit
        for limit in (len(ids), len(ids) - 1):
            assert why_different(sample, tokenizer, token_limit=limit) == f"cut at the token limit, {added}"
        # shorter than the limit: the sampler would have gone on, so the action was shortened afterwards
        assert why_different(sample, tokenizer, token_limit=len(ids) + 1) == \
            f"no end-of-turn token, short of the token limit, {added}"
    # a turn that ends with end-of-turn is never called cut, whatever the limit
    assert why_different(sample_of(tokenizer, canonical + [tokenizer.eos_token_id]), tokenizer,
                         token_limit=2) == "same tokens"
    assert why_different(sample_of(tokenizer, by_character + [tokenizer.eos_token_id]), tokenizer,
                         token_limit=2) == "re-spelled: same text, other tokens"


# --- what a trainer's ratio makes of them -----------------------------------------------------------

def test_log_ratios_score_the_sampled_ids_and_the_text_tokenised_again(tiny_policy):
    tokenizer = tiny_policy.tokenizer
    eos = tokenizer.eos_token_id
    take, take_by_character = spellings(tokenizer, "take knife")
    open_, open_by_character = spellings(tokenizer, "open fridge")
    # a trainer whose total log-probability of each id sequence is known
    totals = {tuple(take + [eos]): -2.0, tuple(take_by_character + [eos]): -5.0,
              tuple(open_ + [eos]): -6.0, tuple(open_by_character + [eos]): -1.0}
    scored = []

    def score(turns):
        scored.append([t.action_ids for t in turns])
        return [totals[tuple(t.action_ids)] for t in turns]

    def recorded(ids):  # the sampler's record agrees with the trainer on the sampled ids
        return sample_of(tokenizer, ids, [totals[tuple(ids)]] + [0.0] * (len(ids) - 1))

    turns = [recorded(take + [eos]), recorded(take_by_character + [eos]), recorded(open_by_character + [eos])]
    ratios = log_ratios(turns, tokenizer, score)
    assert scored == [[t.action_ids for t in turns], [take + [eos], take + [eos], open_ + [eos]]]
    assert ratios == [TurnLogRatio(0.0, 0.0, 0.0),
                      TurnLogRatio(0.0, 3.0, 3.0),  # the canonical spelling is more likely here
                      TurnLogRatio(0.0, 5.0, -5.0)]  # and less likely here
    assert ratio_row(ratios) == {"turns": 3, "mean |log ratio|, sampled ids": 0.0,
                                 "mean |log ratio|, text tokenised again": pytest.approx(8 / 3),
                                 "max |log ratio|, text tokenised again": 5.0,
                                 "share where the text tokenised again is less likely": pytest.approx(1 / 3)}


def test_ratio_row_counts_less_likely_only_beyond_float_rounding():
    ratios = [TurnLogRatio(1e-6, 0.5, -0.5), TurnLogRatio(3e-6, 5e-5, -5e-5), TurnLogRatio(2e-6, 2.0, 2.0),
              TurnLogRatio(0.0, 0.25, -0.25)]
    row = ratio_row(ratios)
    assert row["turns"] == 4
    assert row["mean |log ratio|, sampled ids"] == pytest.approx(1.5e-6)
    assert row["mean |log ratio|, text tokenised again"] == pytest.approx((0.5 + 5e-5 + 2.0 + 0.25) / 4)
    assert row["max |log ratio|, text tokenised again"] == 2.0
    # -5e-5 is float rounding, not a less likely sequence
    assert row["share where the text tokenised again is less likely"] == 0.5


def test_with_the_real_trainer_only_the_text_tokenised_again_moves_the_ratio(tiny_policy):
    model, tokenizer = tiny_policy.model, tiny_policy.tokenizer

    def trainer(turns):
        return turn_logprobs(model, turns, tokenizer.pad_token_id)

    drawn = LanguagePolicy(model, tokenizer).sample(["Now:", "You are in the kitchen."], max_new_tokens=6)
    ratios = log_ratios(drawn, tokenizer, trainer)
    assert all(r.on_sampled_ids < 1e-4 for r in ratios)  # float rounding only
    # a re-spelled turn, recorded as the sampler would have: its own ids' log-probability
    _, by_character = spellings(tokenizer, "take knife")
    ids = by_character + [tokenizer.eos_token_id]
    respelled = Sample("take knife", drawn[0].prompt_ids, ids, [0.0] * len(ids))
    respelled.logprobs[0] = trainer([respelled])[0]
    (ratio,) = log_ratios([respelled], tokenizer, trainer)
    assert ratio.on_sampled_ids < 1e-4 and ratio.on_text > 1e-2


# --- prompts --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def examples():
    return expert_examples("cookingworld", GAMES, env_options=WORLD)


def as_in_the_data(prompt, example):
    return rewrite_recipe(prompt, *recipe_permutations(example.get("recipe_swap", "")))


def test_the_datas_own_layout_rebuilds_every_prompt(tiny_policy, examples):
    assert prompt_parity(tiny_policy, examples, GAMES, DATA_WORLD) == 1.0
    windowed = LanguagePolicy(tiny_policy.model, tiny_policy.tokenizer, history_window=2)
    # a window of past turns changes every prompt but a game's first (no past turns yet)
    assert 0 < prompt_parity(windowed, examples, GAMES, DATA_WORLD) < 1


def test_rewritten_data_is_rebuilt_only_when_the_policys_prompt_is_rewritten_alike(tiny_policy, examples):
    rewritten = counterfactual_recipes(examples, seed=0)
    assert any(new["prompt"] != old["prompt"] for new, old in zip(rewritten, examples))  # the test's premise
    assert prompt_parity(tiny_policy, rewritten, GAMES, DATA_WORLD, rewrite=as_in_the_data) == 1.0
    assert prompt_parity(tiny_policy, rewritten, GAMES, DATA_WORLD) < 1
