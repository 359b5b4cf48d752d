"""Whether evaluation and training see what the data and the sampler saw (chapter 8).

Two silent bugs make a pipeline measure or train another policy than the one it means to:

* a prompt built differently from the SFT data's (:func:`prompt_parity` replays the data's games
  and compares, string for string, the prompt a policy builds with the one the data holds);
* a trainer that keeps only an action's text and tokenises it again instead of scoring the ids
  the sampler drew (:func:`retokenised`, :func:`why_different`; :func:`log_ratios` and
  :func:`ratio_row` measure what that does to the importance ratio at unchanged weights).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.lm.policies import ExpertPolicy, Sample
from tutorial_lib.lm.prompts import render_chat
from tutorial_lib.lm.tokenization import encode_prompt_completion

# --- prompts ---------------------------------------------------------------------------------------


def prompt_parity(policy, examples: Sequence[Mapping[str, Any]], seeds: Iterable[int],
                  env_options: Mapping[str, Any], *, game: str = "cookingworld",
                  rewrite: Callable[[str, Mapping[str, Any]], str] | None = None) -> float:
    """Share of the SFT data's prompts of the games ``seeds`` that ``policy`` rebuilds exactly.

    Each game is replayed along its gold path in the world the data was played in
    (``env_options``, with its fold), and at every turn the prompt ``policy`` builds is compared with
    the data's, chat template included. Pick games without injected mistakes: those took another
    path than the gold one. ``rewrite(prompt, example)`` applies to the policy's prompt what the
    data did to the episode's prompts (chapter 3's counterfactual recipes), given the episode's
    first example; without it the prompts are compared as built. (A callable: the rewrites belong
    to :mod:`tutorial_lib.data`, a layer above this one.)
    """
    stored = {}
    for e in examples:  # the first example of a step is the episode's own (later ones: extra rewrites)
        stored.setdefault((e["seed"], e["turn"]), e)
    gold = run_episodes(game, ExpertPolicy(), seeds, env_options=dict(env_options), batch_size=1)
    same = []
    for record in gold:
        first = stored[(record.seed, 0)]
        for t in range(record.length):
            read = policy.prompt_for(game, record.task, record.turns[: t + 1])
            if rewrite is not None:
                read = rewrite(read, first)
            data_prompt = stored[(record.seed, t)]["prompt"]
            trained = render_chat(policy.tokenizer, [{"role": "user", "content": data_prompt}])
            same.append(read == trained)
    return statistics.fmean(same)


# --- action tokens ---------------------------------------------------------------------------------


def retokenised(sample: Sample, tokenizer) -> list[int]:
    """The ids a trainer that kept only the action text would score: the text encoded, plus end-of-turn."""
    return encode_prompt_completion(tokenizer, "", sample.text)["input_ids"]


def why_different(sample: Sample, tokenizer, token_limit: int | None = None) -> str:
    """Why re-tokenising a turn's text does not give back its sampled ids (``"same tokens"`` if it does).

    ``token_limit`` is the most tokens the sampler could write for the action (``MAX_NEW_TOKENS``
    of its game). An action without end-of-turn is called cut at the token limit only if it is that
    long; without ``token_limit`` the reason names the missing end-of-turn alone.
    """
    again = retokenised(sample, tokenizer)
    if sample.action_ids == again:
        return "same tokens"
    # the re-encoding ends with end-of-turn; an action cut at the token limit did not
    if sample.action_ids[-1] != tokenizer.eos_token_id:
        if token_limit is None:
            missing = "no end-of-turn token (as a cut at the token limit gives)"
        elif len(sample.action_ids) >= token_limit:
            missing = "cut at the token limit"
        else:  # the sampler stops only at end-of-turn or the limit: this turn was shortened after sampling
            missing = "no end-of-turn token, short of the token limit"
        if sample.action_ids == again[:-1]:
            return f"{missing}, only end-of-turn added"
        return f"{missing}, and re-spelled"
    if any(i in tokenizer.all_special_ids for i in sample.action_ids[:-1]):
        return "special token inside the action"
    if "\ufffd" in sample.text:  # decoding writes bytes that are not valid UTF-8 as the replacement character
        return "bytes that are not UTF-8"
    return "re-spelled: same text, other tokens"


class TurnLogRatio(NamedTuple):
    """One turn's log importance ratio at unchanged weights, against the sampler's record."""

    #: |log ratio| with the trainer scoring the sampled ids: float rounding only
    on_sampled_ids: float
    #: |log ratio| with the trainer scoring the text tokenised again
    on_text: float
    #: the same, signed: negative where the text tokenised again is less likely than what was sampled
    on_text_signed: float


def log_ratios(turns: Sequence[Sample], tokenizer,
               score: Callable[[Sequence[Sample]], list[float]]) -> list[TurnLogRatio]:
    """Per turn, the log ratio a trainer would compute at unchanged weights, on the sampled ids and
    on the text tokenised again. ``score`` is the trainer's total log-probability of each turn's
    action, e.g. ``lambda turns: turn_logprobs(model, turns, tokenizer.pad_token_id)`` (chapter 5)."""
    sampler = [sum(s.logprobs) for s in turns]
    on_sampled = score(turns)
    # the logprobs of a re-tokenised turn are never read: only its ids are scored
    on_text = score([Sample(s.text, s.prompt_ids, ids, [0.0] * len(ids))
                     for s in turns for ids in [retokenised(s, tokenizer)]])
    return [TurnLogRatio(abs(a - c), abs(b - c), b - c) for a, b, c in zip(on_sampled, on_text, sampler)]


def ratio_row(ratios: Sequence[TurnLogRatio]) -> dict[str, float]:
    """A group of turns' log ratios summarised: one row of chapter 8's table."""
    return {"turns": len(ratios),
            "mean |log ratio|, sampled ids": statistics.fmean(r.on_sampled_ids for r in ratios),
            "mean |log ratio|, text tokenised again": statistics.fmean(r.on_text for r in ratios),
            "max |log ratio|, text tokenised again": max(r.on_text for r in ratios),
            # below -1e-4: less likely beyond float rounding
            "share where the text tokenised again is less likely": statistics.fmean(r.on_text_signed < -1e-4
                                                                                    for r in ratios)}
