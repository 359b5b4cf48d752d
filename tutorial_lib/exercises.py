"""Checks for the book's exercises (chapters 2-9): your function against the library's, case by case.

Each ``check_*`` runs the reader's function on a handful of cases, the edges included (a truncated
episode, a batch whose returns all tie, a row with nothing to score, text no parser expects), compares
it with the library's own implementation, and returns a :class:`CheckResult`: ``passed``, or what
differs in words a reader can act on. A check never raises, whatever the reader's function does.

    from tutorial_lib.exercises import check_gae

    def my_gae(rewards, values, gamma, lam, last_value=0.0, terminated=True):
        ...
    check_gae(my_gae)     # a notebook shows "passed: check_gae (...)" or "not yet: check_gae ..."

Where a common mistake has a recognisable signature (the std divided by ``n - 1`` instead of ``n``,
a truncated episode bootstrapped from 0, logits not shifted against labels), the message names it.
:func:`check_prediction` checks a "predict, then run" exercise: did the measured change go the way
the reader said, beyond two standard errors?

Imports the layers below the top one (rl, data's tokenisation, envs, evaluation); nothing imports it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from tutorial_lib.envs.guess_the_number import GuessTheNumberEnv
from tutorial_lib.envs.parsing import parse_tictactoe_move
from tutorial_lib.evaluation.stats import compare_rates, rate_noise
from tutorial_lib.lm.tokenization import IGNORE_INDEX, encode_prompt_completion
from tutorial_lib.rl import advantages as library
from tutorial_lib.rl.ppo import clipped_surrogate

__all__ = [
    "CheckResult", "check_labels", "check_move_parser", "check_binary_search", "check_sft_loss",
    "sft_loss_with_a_bug", "check_discounted_returns", "check_rebn", "check_state_baseline", "check_gae",
    "check_clipped_surrogate", "check_group_advantage", "check_k3", "check_two_standard_errors",
    "check_lora_forward", "check_lora_parameter_count", "check_prediction",
]

TOLERANCE = 1e-5  # the references compute in float64 or float32 on tiny inputs; rounding stays far below


@dataclass
class CheckResult:
    """What a check found: ``passed``, the cases it ran, and each problem in words."""

    name: str
    cases: list[str]
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        if self.passed:
            return f"passed: {self.name} ({len(self.cases)} cases: {'; '.join(self.cases)})"
        lines = [f"not yet: {self.name}"] + [f"  - {problem}" for problem in self.problems]
        return "\n".join(lines)

    __str__ = __repr__


class _ReaderError(Exception):
    """The reader's function raised: the message says what, in the check's words."""


def _call(fn: Callable, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise _ReaderError("your function raises NotImplementedError: write its body first") from None
    except Exception as error:  # noqa: BLE001 - any failure of the reader's code is a finding, not a crash
        raise _ReaderError(f"your function raised {type(error).__name__}: {error}") from None


def _run(name: str, cases: Sequence[tuple[str, Callable[[], str | None]]]) -> CheckResult:
    """Run each case (a label and a function returning a problem or None); the first exception of the
    reader's code ends the check (the same error would repeat in every case)."""
    result = CheckResult(name, [label for label, _ in cases])
    for label, case in cases:
        try:
            problem = case()
        except _ReaderError as error:
            result.problems.append(f"{label}: {error}")
            break
        if problem:
            result.problems.append(f"{label}: {problem}")
    return result


def _floats(values) -> list[float] | None:
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        return None


def _close(got, expected, tol: float = TOLERANCE) -> bool:
    got = _floats(got)
    return got is not None and len(got) == len(expected) and all(
        math.isfinite(g) and abs(g - e) <= tol * max(1.0, abs(e)) for g, e in zip(got, expected))


def _nested_close(got, expected) -> bool:
    try:
        return len(got) == len(expected) and all(_close(g, e) for g, e in zip(got, expected))
    except TypeError:
        return False


def _fmt(values) -> str:
    try:
        if values and isinstance(values[0], (list, tuple)):
            return "[" + ", ".join(_fmt(v) for v in values) + "]"
        return "[" + ", ".join(f"{float(v):.4g}" for v in values) + "]"
    except (TypeError, ValueError):
        return repr(values)


def _scalar(value) -> float | None:
    try:
        return float(value.detach() if isinstance(value, torch.Tensor) else value)
    except (TypeError, ValueError, RuntimeError):
        return None


# -- chapter 2: labels and parsing --------------------------------------------------------------


class _IdTokenizer:
    """Token ids written as characters, so the library's string-level encoder can run on id lists."""

    OFFSET = 0x4E00

    def __init__(self, eos_id: int) -> None:
        self.eos_token_id = eos_id

    def text(self, ids: Sequence[int]) -> str:
        return "".join(chr(self.OFFSET + i) for i in ids)

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) - self.OFFSET for c in text]}


def check_labels(encode: Callable) -> CheckResult:
    """Chapter 2. ``encode(prompt_ids, completion_ids, eos_id, max_length=None)`` returns
    ``{"input_ids": [...], "labels": [...]}``: prompt labels ``-100``, the end-of-sequence id appended
    unless the completion ends with it, and ``max_length`` cutting the prompt from the left."""
    eos = 2
    cases = [
        ("a prompt and a completion", [5, 6, 7, 8], [9, 10], None),
        ("a completion that already ends with eos", [5, 6], [9, eos], None),
        ("an empty completion (the model should learn to stop at once)", [5, 6, 7], [], None),
        ("max_length=5 with a prompt of 6 tokens", [11, 12, 13, 14, 15, 16], [9, 10], 5),
        ("max_length that fits everything", [5, 6], [9], 10),
    ]

    def case(prompt, completion, max_length):
        def run() -> str | None:
            tokenizer = _IdTokenizer(eos)
            expected = encode_prompt_completion(tokenizer, tokenizer.text(prompt), tokenizer.text(completion),
                                                max_length=max_length)
            got = _call(encode, list(prompt), list(completion), eos, max_length=max_length)
            if not isinstance(got, dict) or "input_ids" not in got or "labels" not in got:
                return "return a dict with the keys 'input_ids' and 'labels'"
            ids, labels = list(got["input_ids"]), list(got["labels"])
            if ids == expected["input_ids"] and labels == expected["labels"]:
                return None
            if len(ids) != len(labels):
                return f"input_ids has {len(ids)} tokens but labels {len(labels)}: one label per token"
            if max_length is not None and len(ids) > max_length:
                return f"{len(ids)} tokens is more than max_length={max_length}: cut the prompt's oldest tokens"
            if max_length is not None and ids[-len(expected['input_ids']):] != expected["input_ids"]:
                if ids[: max_length - len(completion) - 1] == prompt[: max_length - len(completion) - 1]:
                    return "you kept the start of the prompt; cut it from the left (its oldest tokens), keeping the end the model reads last"
            if ids.count(eos) > expected["input_ids"].count(eos):
                return "the completion already ends with eos_id: do not append a second one"
            if eos not in ids:
                return "append eos_id to the completion, so the model learns to stop after its action"
            n_prompt = expected["labels"].count(IGNORE_INDEX)
            if labels[:n_prompt] != [IGNORE_INDEX] * n_prompt:
                return f"the prompt's {n_prompt} labels should be -100 (the loss skips them); yours are {labels[:n_prompt]}"
            if labels[n_prompt:] != expected["labels"][n_prompt:]:
                return (f"the completion's labels should be its own token ids {expected['labels'][n_prompt:]}; "
                        f"yours are {labels[n_prompt:]}")
            return f"expected input_ids {expected['input_ids']} and labels {expected['labels']}; got {ids} and {labels}"

        return run

    return _run("check_labels", [(label, case(p, c, m)) for label, p, c, m in cases])


def check_move_parser(parse: Callable[[str], str | None]) -> CheckResult:
    """Chapter 2. ``parse(text)`` returns the first well-formed move as ``"x(1,2)"`` (tags optional,
    the mark in lower case), or ``None``; it must never raise, whatever the text."""
    texts = [
        ("the answer format", "<move>x(1,2)</move>"),
        ("a bare move", "o(0,2)"),
        ("spaces and a capital mark", "<move> X ( 2 , 0 ) </move>"),
        ("talk before and a second move after", "I will block. <move>o(1,1)</move> then x(0,0)"),
        ("a leading zero", "<move>x(01,2)</move>"),
        ("empty text", ""),
        ("no move at all", "I resign."),
        ("a broken move", "<move>x(1,</move>"),
        ("a number of 5,000 digits (int() refuses it)", "x(" + "9" * 5000 + ",1)"),
        ("unicode noise", "\u202e\u0000<move>\u00d7(1,1)</move>\ud83d\ude00"),
    ]

    def case(text):
        def run() -> str | None:
            expected = parse_tictactoe_move(text).value
            got = _call(parse, text)
            if got == expected:
                return None
            shown = text if len(text) < 60 else text[:40] + "..."
            return f"on {shown!r} expected {expected!r}, got {got!r}"

        return run

    result = _run("check_move_parser", [(label, case(text)) for label, text in texts])
    for i, problem in enumerate(result.problems):
        if "raised" in problem:
            result.problems[i] = (problem + ". Model output is arbitrary text: a parser returns None on what it "
                                  "cannot read, and never raises (Python's int() refuses more than 4,300 digits)")
    return result


# -- chapter 3: the GuessTheNumber expert ---------------------------------------------------------


def check_binary_search(next_guess: Callable[[int, int], int]) -> CheckResult:
    """Chapter 3. ``next_guess(low, high)`` is the expert's guess when the secret is known to lie in
    ``[low, high]``; every secret of 1-10 (4 turns) and 1-50 (7 turns) must be found in time."""

    def play(low0: int, high0: int, turns: int):
        def run() -> str | None:
            for secret in range(low0, high0 + 1):
                low, high, guesses = low0, high0, []
                for _ in range(turns):
                    guess = _call(next_guess, low, high)
                    if not isinstance(guess, int) or isinstance(guess, bool):
                        return f"return an int; got {guess!r} for the range {low}-{high}"
                    guesses.append(guess)
                    if not low <= guess <= high:
                        return (f"secret {secret}: guess {guess} lies outside what the feedback allows "
                                f"({low}-{high}); guesses so far {guesses}")
                    if guess == secret:
                        break
                    low, high = (guess + 1, high) if guess < secret else (low, guess - 1)
                else:
                    return (f"secret {secret} not found in {turns} turns (guesses {guesses}); "
                            "guess the middle of what is left, so each answer halves it")
            return None

        return run

    env = GuessTheNumberEnv(preset="hard")  # the library's expert, named in the case: its first guess on 1-50
    env.reset(seed=0)
    return _run("check_binary_search", [("every secret of 1-10 in 4 turns", play(1, 10, 4)),
                                         (f"every secret of 1-50 in 7 turns (the library opens with "
                                          f"{env.expert_action()})", play(1, 50, 7))])


# -- chapter 4: the masked SFT loss ----------------------------------------------------------------


def _reference_sft_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The library's loss (``data.sft.completion_logits`` then cross-entropy): logits at position t
    score the label at t + 1, only where that label is not -100, averaged over those tokens."""
    targets = labels[:, 1:]
    keep = targets != IGNORE_INDEX
    return torch.nn.functional.cross_entropy(logits[:, :-1][keep].float(), targets[keep])


def sft_loss_with_a_bug(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The masked SFT loss, written the way it often is the first time. It runs, returns a number of
    the right size, and trains something; but it is wrong. Find how (chapter 4's diagnostics)."""
    vocab = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1),
                                             ignore_index=IGNORE_INDEX)


def _sft_batches() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    vocab = 11
    ids = torch.randint(3, vocab, (3, 9), generator=generator)
    labels = ids.clone()
    labels[0, :5] = IGNORE_INDEX  # a prompt of 5 tokens, then the completion
    labels[1, :3] = IGNORE_INDEX
    labels[1, 7:] = IGNORE_INDEX  # right padding
    labels[2, :8] = IGNORE_INDEX  # one scored token
    random_logits = torch.randn(3, 9, vocab, generator=generator)
    # a model that predicts every next label almost surely: the loss should be ~0
    perfect = torch.full((3, 9, vocab), -20.0)
    for row in range(3):
        for t in range(8):
            perfect[row, t, ids[row, t + 1]] = 20.0
    lengths = torch.tensor([[IGNORE_INDEX] * 2 + [4] + [IGNORE_INDEX] * 6,
                            [IGNORE_INDEX] * 2 + [5, 6, 7, 8, 9, 4, 4]])
    return [("random logits, prompts and padding masked", random_logits, labels),
            ("a model that predicts every label (loss should be ~0)", perfect, labels),
            ("a short and a long completion (a mean over tokens, not over rows)",
             torch.randn(2, 9, vocab, generator=generator), lengths)]


def check_sft_loss(loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> CheckResult:
    """Chapter 4. ``loss(logits, labels)``: the mean cross-entropy of next-token predictions over the
    labelled tokens (``-100`` is ignored), as the library trains SFT."""

    def case(logits, labels):
        def run() -> str | None:
            expected = float(_reference_sft_loss(logits, labels))
            got = _scalar(_call(loss, logits.clone(), labels.clone()))
            if got is None:
                return "return a scalar tensor (or a float)"
            if abs(got - expected) <= 1e-4 * max(1.0, abs(expected)):
                return None
            unshifted = float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                                labels.reshape(-1), ignore_index=IGNORE_INDEX))
            if abs(got - unshifted) <= 1e-4 * max(1.0, abs(unshifted)):
                return (f"expected {expected:.4f}, got {got:.4f}: the logits at position t predict the token at "
                        "t + 1, so compare logits[:, :-1] with labels[:, 1:]")
            targets, keep = labels[:, 1:], labels[:, 1:] != IGNORE_INDEX
            per_token = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                                          targets.reshape(-1).clamp(min=0), reduction="none")
            per_token = per_token.view(targets.shape) * keep
            summed = float(per_token.sum())
            if abs(got - summed) <= 1e-4 * max(1.0, abs(summed)):
                return f"expected {expected:.4f}, got {got:.4f}: that is the sum; divide by the number of labelled tokens"
            rows = keep.any(1)
            row_means = float((per_token.sum(1)[rows] / keep.sum(1)[rows]).mean())
            if abs(got - row_means) <= 1e-4 * max(1.0, abs(row_means)):
                return (f"expected {expected:.4f}, got {got:.4f}: a mean of the rows' means weights a short "
                        "completion's tokens more; average over every labelled token of the batch")
            return f"expected {expected:.4f}, got {got:.4f}"

        return run

    return _run("check_sft_loss", [(label, case(logits, labels)) for label, logits, labels in _sft_batches()])


# -- chapter 5: returns and baselines --------------------------------------------------------------


def check_discounted_returns(fn: Callable) -> CheckResult:
    """Chapter 5. ``fn(rewards, gamma, bootstrap=0.0)``: ``G_t = r_t + gamma G_{t+1}``, with ``G_T``
    (after the last turn) equal to ``bootstrap``: 0 for a finished episode, V(s_T) for a cut-off one."""
    cases = [
        ("a win on the third turn, gamma 0.9", [0.0, 0.0, 1.0], 0.9, 0.0),
        ("a single turn", [0.5], 0.9, 0.0),
        ("no discount (gamma 1)", [1.0, -0.5, 2.0], 1.0, 0.0),
        ("gamma 0: each turn's own reward", [1.0, -0.5, 2.0], 0.0, 0.0),
        ("an episode cut off by the turn limit, bootstrap 0.5", [0.0, 0.1], 0.9, 0.5),
        ("an empty episode", [], 0.9, 0.0),
    ]

    def case(rewards, gamma, bootstrap):
        def run() -> str | None:
            expected = library.discounted_returns(rewards, gamma, bootstrap=bootstrap)
            got = _call(fn, list(rewards), gamma, bootstrap=bootstrap)
            if _close(got, expected):
                return None
            if bootstrap and _close(got, library.discounted_returns(rewards, gamma)):
                return (f"expected {_fmt(expected)}, got {_fmt(got)}: the last turn of a cut-off episode "
                        "should add gamma * bootstrap (V of the state it stopped in); yours uses 0")
            forward = []
            running = 0.0
            for r in rewards:
                running = running * gamma + r
                forward.append(running)
            if rewards and _close(got, forward):
                return (f"expected {_fmt(expected)}, got {_fmt(got)}: G_t sums the rewards from turn t onwards; "
                        "loop from the last turn backwards")
            return f"expected {_fmt(expected)}, got {_fmt(got)}"

        return run

    return _run("check_discounted_returns", [(label, case(*args)) for label, *args in cases])


def _std(values: list[float], ddof: int) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - ddof))


def check_rebn(fn: Callable) -> CheckResult:
    """Chapter 5. ``fn(returns_per_episode)``: return batch-normalisation, ``(G - mean) / std`` over every
    turn of the batch (population std); zeros when every return is the same."""
    cases = [
        ("two episodes of different lengths", [[0.81, 0.9, 1.0], [-0.9, -1.0]]),
        ("three one-turn episodes", [[1.0], [0.0], [0.5]]),
        ("every return the same (no signal: zeros, not a division by 0)", [[1.0, 1.0], [1.0]]),
        ("a single turn", [[0.3]]),
        ("an empty episode in the batch", [[0.2, 0.4], []]),
    ]

    def case(returns):
        def run() -> str | None:
            expected = library.rebn(returns)
            got = _call(fn, [list(e) for e in returns])
            if _nested_close(got, expected):
                return None
            flat = [g for e in returns for g in e]
            if len(flat) > 1 and _std(flat, 0) > 0:
                mean = sum(flat) / len(flat)
                sample = [[(g - mean) / _std(flat, 1) for g in e] for e in returns]
                if _nested_close(got, sample):
                    return f"expected {_fmt(expected)}, got {_fmt(got)}: divide by the population std (by n, not n - 1)"
                per_episode = [[(g - sum(e) / len(e)) / (_std(e, 0) or 1.0) for g in e] if e else [] for e in returns]
                if _nested_close(got, per_episode):
                    return (f"expected {_fmt(expected)}, got {_fmt(got)}: take the mean and std over every turn "
                            "of the batch, not per episode")
            try:
                finite = all(math.isfinite(float(g)) for e in got for g in e)
            except (TypeError, ValueError):
                finite = True
            if not finite:
                return (f"got {_fmt(got)}: when every return is the same the std is 0; the batch says nothing "
                        "about which action was better, so return zeros")
            return f"expected {_fmt(expected)}, got {_fmt(got)}"

        return run

    return _run("check_rebn", [(label, case(returns)) for label, returns in cases])


def check_state_baseline(fn: Callable) -> CheckResult:
    """Chapter 5. ``fn(returns_per_episode, states_per_episode)``: each return minus the mean return of
    the batch's turns in the same state (the batch mean for a state seen once), then divided by the
    population std of those centred values (the library's ``rebn_by_state``)."""
    cases = [
        ("one state seen three times, one seen once",
         [[1.0, 0.0], [0.0], [1.0]], [["start", "a"], ["start"], ["start"]]),
        ("every state different (the same as ReBN)", [[0.5, 1.0], [0.0]], [["a", "b"], ["c"]]),
        ("a confident policy: one state, every game won", [[1.0], [1.0], [1.0], [1.0]], [["s"], ["s"], ["s"], ["s"]]),
        ("two states each seen twice", [[1.0, 0.2], [0.0, 0.4]], [["s", "t"], ["s", "t"]]),
    ]

    def case(returns, states):
        def run() -> str | None:
            expected = library.rebn_by_state(returns, states)
            got = _call(fn, [list(e) for e in returns], [list(s) for s in states])
            if _nested_close(got, expected):
                return None
            if _nested_close(got, library.rebn(returns)):
                return (f"expected {_fmt(expected)}, got {_fmt(got)}: that is ReBN (the batch mean for every turn); "
                        "subtract the mean return of the turns taken in the same state")
            return f"expected {_fmt(expected)}, got {_fmt(got)}"

        return run

    return _run("check_state_baseline", [(label, case(r, s)) for label, r, s in cases])


# -- chapter 6: GAE and PPO's clipped loss ---------------------------------------------------------


def check_gae(fn: Callable) -> CheckResult:
    """Chapter 6. ``fn(rewards, values, gamma, lam, last_value=0.0, terminated=True)`` returns
    ``(advantages, returns)``: ``delta_t = r_t + gamma V(s_{t+1}) - V(s_t)``,
    ``A_t = delta_t + gamma lam A_{t+1}``, V after the last turn 0 if the episode terminated, else
    ``last_value``; ``returns = advantages + values``."""
    cases = [
        ("a finished episode", [0.0, 0.0, 1.0], [0.3, 0.5, 0.8], 1.0, 0.95, 0.0, True),
        ("an episode cut off by the turn limit", [0.0, 0.1], [0.2, 0.4], 0.9, 0.95, 0.6, False),
        ("a single turn", [1.0], [0.4], 1.0, 0.95, 0.0, True),
        ("lam 0: one TD error", [0.0, 1.0], [0.5, 0.7], 0.9, 0.0, 0.0, True),
        ("lam 1: the Monte-Carlo return minus V", [0.5, 0.0, -1.0], [0.1, 0.2, 0.3], 0.9, 1.0, 0.0, True),
    ]

    def case(rewards, values, gamma, lam, last_value, terminated):
        def run() -> str | None:
            exp_adv, exp_ret = library.gae(rewards, values, gamma, lam, last_value=last_value, terminated=terminated)
            got = _call(fn, list(rewards), list(values), gamma, lam, last_value=last_value, terminated=terminated)
            try:
                adv, ret = got
            except (TypeError, ValueError):
                return "return a pair (advantages, returns)"
            if _close(adv, exp_adv) and _close(ret, exp_ret):
                return None
            if not _close(adv, exp_adv):
                if not terminated:
                    zero, _ = library.gae(rewards, values, gamma, lam, terminated=True)
                    if _close(adv, zero):
                        return (f"expected advantages {_fmt(exp_adv)}, got {_fmt(adv)}: the last turn of a truncated "
                                f"episode should bootstrap from V(s_T) = last_value ({last_value}); yours uses 0")
                else:
                    boot, _ = library.gae(rewards, values, gamma, lam, last_value=values[-1], terminated=False)
                    if _close(adv, boot) and values[-1] != 0:
                        return (f"expected {_fmt(exp_adv)}, got {_fmt(adv)}: a terminated episode has nothing after its "
                                "last turn; V after it is 0")
                return f"expected advantages {_fmt(exp_adv)}, got {_fmt(adv)}"
            if _close(ret, exp_adv):
                return f"expected returns {_fmt(exp_ret)}, got {_fmt(ret)}: the value targets are advantages + values"
            return f"expected returns {_fmt(exp_ret)}, got {_fmt(ret)}"

        return run

    return _run("check_gae", [(label, case(*args)) for label, *args in cases])


def _surrogate_cases():
    generator = torch.Generator().manual_seed(1)
    old = -torch.rand(3, 5, generator=generator) * 2
    shift = torch.tensor([[0.5, -0.5, 0.05, 0.3, -0.3], [-0.6, 0.6, 0.0, 0.1, 9.0], [0.25, -0.25, 0.4, 3.0, 7.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    advantages = torch.tensor([[1.0], [-1.5], [0.7]])
    return [("ratios far past the clip both ways, positive and negative advantages, padding",
             old + shift, old, advantages, mask, 0.2),
            ("the weights that sampled (every ratio 1)", old.clone(), old, advantages, mask, 0.2),
            ("a wide clip range (0.5)", old + shift, old, -advantages, mask, 0.5)]


def check_clipped_surrogate(fn: Callable) -> CheckResult:
    """Chapter 6. ``fn(logprobs, old_logprobs, advantages, mask, clip_range)``: the mean over the masked
    tokens of ``max(-A r, -A clip(r, 1 - eps, 1 + eps))``, ``r = exp(logprobs - old_logprobs)``. Its
    value and its gradient with respect to ``logprobs`` are compared."""

    def case(logprobs, old, advantages, mask, clip_range):
        def run() -> str | None:
            ref_lp = logprobs.clone().requires_grad_(True)
            expected, _ = clipped_surrogate(ref_lp, old, advantages, mask, clip_range, int(mask.sum()))
            target = float(expected.detach())
            expected.backward()
            mine = logprobs.clone().requires_grad_(True)
            got = _call(fn, mine, old.clone(), advantages.clone(), mask.clone(), clip_range)
            value = _scalar(got)
            if value is None:
                return "return a scalar tensor"
            if abs(value - target) > 1e-5:
                ratio = (logprobs - old).exp()
                optimistic = torch.min(-advantages * ratio, -advantages * ratio.clamp(1 - clip_range, 1 + clip_range))
                if abs(value - float((optimistic * mask).sum() / mask.sum())) < 1e-5:
                    return (f"expected {target:.5f}, got {value:.5f}: take the pessimistic bound, the max "
                            "of the two losses (the min of the two objectives)")
                full = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_range, 1 + clip_range))
                if abs(value - float(full.mean())) < 1e-5:
                    return (f"expected {target:.5f}, got {value:.5f}: average over the action tokens only "
                            "(the mask), not every position")
                return f"expected {target:.5f}, got {value:.5f}"
            if not isinstance(got, torch.Tensor) or not got.requires_grad:
                return "the loss carries no gradient to logprobs: compute it from logprobs with torch operations"
            try:
                got.backward()
            except RuntimeError as error:
                return f"backward() failed on your loss: {error}"
            if mine.grad is None or not torch.allclose(mine.grad, ref_lp.grad, atol=1e-6):
                return ("the value is right but its gradient is not: a clipped token's gradient should be 0 "
                        "(clamp the ratio, do not detach the whole term)")
            return None

        return run

    return _run("check_clipped_surrogate", [(label, case(*args)) for label, *args in _surrogate_cases()])


# -- chapter 7: GRPO's group advantage and the k3 KL estimate --------------------------------------


def check_group_advantage(fn: Callable) -> CheckResult:
    """Chapter 7. ``fn(rewards, group_size, scale=True)``: each reward minus its group's mean, divided by
    the group's unbiased std (``n - 1``, as TRL) plus a small epsilon when ``scale``; a group whose
    rewards all tie gets zeros."""
    cases = [
        ("two groups of four", [1.0, 0.0, 0.0, 1.0, 0.1, 0.1, 1.0, 0.0], 4, True),
        ("a group whose rewards all tie (zero spread)", [1.0, 1.0, 1.0, 0.0, 1.0, 0.0], 3, True),
        ("without the std (Dr. GRPO, scale=False)", [1.0, 0.0, 0.5, 0.1], 2, False),
        ("groups of one", [0.3, 0.7], 1, True),
    ]

    def case(rewards, group_size, scale):
        def run() -> str | None:
            expected = library.group_normalise(rewards, group_size, scale=scale)
            got = _call(fn, list(rewards), group_size, scale=scale)
            if _close(got, expected, tol=1e-4):  # the epsilon in the divisor is the reader's to choose
                return None
            groups = [rewards[i:i + group_size] for i in range(0, len(rewards), group_size)]
            if scale and group_size > 1:
                population = []
                for g in groups:
                    m, s = sum(g) / len(g), _std(g, 0)
                    population.extend((r - m) / s if s > 0 else 0.0 for r in g)
                if _close(got, population, tol=1e-4):
                    return (f"expected {_fmt(expected)}, got {_fmt(got)}: TRL divides by the unbiased std of the "
                            "group (n - 1), as the library does")
            mean = sum(rewards) / len(rewards)
            if _close(got, [r - mean for r in rewards], tol=1e-4) or (
                    len(rewards) > 1 and _std(rewards, 1) > 0
                    and _close(got, [(r - mean) / _std(rewards, 1) for r in rewards], tol=1e-4)):
                return (f"expected {_fmt(expected)}, got {_fmt(got)}: compare each reward with its own group's mean "
                        "(the samples of the same prompt), not the batch's")
            values = _floats(got) or []
            if any(not math.isfinite(v) for v in values):
                return (f"got {_fmt(got)}: a group whose rewards all tie has std 0; its advantages are 0 (nothing "
                        "to learn from it)")
            return f"expected {_fmt(expected)}, got {_fmt(got)}"

        return run

    return _run("check_group_advantage", [(label, case(*args)) for label, *args in cases])


def _k3_reference(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> float:
    log_ratio = (ref_logprobs - logprobs).masked_fill(~mask, 0.0)
    return float(((log_ratio.exp() - 1 - log_ratio) * mask).sum() / mask.sum())


def check_k3(fn: Callable) -> CheckResult:
    """Chapter 7. ``fn(logprobs, ref_logprobs, mask)``: the mean over the masked tokens of Schulman's k3
    estimate of KL(pi || ref) on tokens sampled from pi: ``r = exp(ref - logp)``, ``k3 = r - 1 - log r``
    (the library's ``sampler_kl_sums`` computes the same sum)."""
    generator = torch.Generator().manual_seed(2)
    logprobs = -torch.rand(2, 4, generator=generator) * 3
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    cases = [
        ("the policy equal to the reference (KL 0)", logprobs, logprobs.clone(), mask),
        ("a policy that moved, with padding", logprobs, logprobs + torch.randn(2, 4, generator=generator) * 0.5, mask),
        ("a policy far from the reference", logprobs, logprobs - 2.0, mask),
    ]

    def case(lp, ref, m):
        def run() -> str | None:
            expected = _k3_reference(lp, ref, m)
            got = _scalar(_call(fn, lp.clone(), ref.clone(), m.clone()))
            if got is None:
                return "return a scalar tensor (or a float)"
            if abs(got - expected) <= 1e-5 * max(1.0, abs(expected)):
                return None
            k1 = float(((lp - ref) * m).sum() / m.sum())
            if abs(got - k1) < 1e-5:
                return (f"expected {expected:.5f}, got {got:.5f}: that is k1, the mean of log pi - log ref (unbiased, "
                        "but it can go negative); k3 is r - 1 - log r with r = exp(ref - logp)")
            wrong_way = _k3_reference(ref, lp, m)
            if abs(got - wrong_way) < 1e-5:
                return (f"expected {expected:.5f}, got {got:.5f}: r is ref/pi, the other distribution over the one the "
                        "tokens were sampled from: exp(ref_logprobs - logprobs)")
            log_ratio = ref - lp
            unmasked = float((log_ratio.exp() - 1 - log_ratio).mean())
            if abs(got - unmasked) < 1e-5:
                return f"expected {expected:.5f}, got {got:.5f}: average over the masked tokens only"
            return f"expected {expected:.5f}, got {got:.5f}"

        return run

    return _run("check_k3", [(label, case(*args)) for label, *args in cases])


# -- chapter 8: noise in an evaluation -------------------------------------------------------------


def check_two_standard_errors(fn: Callable) -> CheckResult:
    """Chapter 8. ``fn(before, after, episodes)``: two standard errors of ``after - before`` for two
    rates, each measured over ``episodes`` independent games (binomial; a rate of exactly 0 or 1
    counted half a game from the edge, as the library's ``rate_noise``)."""
    cases = [("two middling rates over 200 games", 0.55, 0.62, 200),
             ("rates near the edge over 50 games", 0.9, 0.96, 50),
             ("a rate of exactly 0 twice (still not a sure 0)", 0.0, 0.0, 200),
             ("a rate of exactly 1", 1.0, 0.8, 100)]

    def case(before, after, episodes):
        def run() -> str | None:
            expected = rate_noise(before, after, episodes)
            got = _scalar(_call(fn, before, after, episodes))
            if got is None:
                return "return a number"
            if abs(got - expected) <= 1e-6:
                return None
            if abs(2 * got - expected) <= 1e-6:
                return f"expected {expected:.4f}, got {got:.4f}: that is one standard error; the book's bar is two"
            plain = 2 * math.sqrt(before * (1 - before) / episodes + after * (1 - after) / episodes)
            if abs(got - plain) <= 1e-6:
                return (f"expected {expected:.4f}, got {got:.4f}: at a rate of exactly 0 or 1 the binomial formula "
                        "gives no spread; count the rate as half a game from the edge (0.5 / episodes)")
            return f"expected {expected:.4f}, got {got:.4f}"

        return run

    return _run("check_two_standard_errors", [(label, case(*args)) for label, *args in cases])


def check_prediction(predicted: str, before: float, after: float, episodes: int, *, name: str = "the rate",
                     higher_is_better: bool = True) -> CheckResult:
    """Any chapter's "predict, then run" exercise. ``predicted`` is ``"up"``, ``"down"`` or ``"same"``;
    the measured change counts as up or down only beyond two standard errors (``compare_rates``)."""
    cases = [f"{name}: {before:.3f} -> {after:.3f} over {episodes} games"]
    if predicted not in ("up", "down", "same"):
        return CheckResult("check_prediction", cases, [f"predict 'up', 'down' or 'same', not {predicted!r}"])
    change = compare_rates(name, before, after, episodes, higher_is_better=True)
    measured = "same" if change.verdict == "noise" else ("up" if change.difference > 0 else "down")
    if measured == predicted:
        return CheckResult("check_prediction", cases + [f"measured {measured}, as you predicted"])
    return CheckResult("check_prediction", cases, [
        f"you predicted {predicted!r}; {name} went from {before:.3f} to {after:.3f}, two standard errors "
        f"{change.noise:.3f}: that is {measured!r}. Which part of your reasoning does the run contradict?"])


# -- chapter 9: LoRA -------------------------------------------------------------------------------


def _peft_linear(weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, alpha: float, rank: int):
    from peft import LoraConfig, get_peft_model

    out_features, in_features = weight.shape
    module = torch.nn.Sequential()
    module.add_module("proj", torch.nn.Linear(in_features, out_features, bias=False))
    module.proj.weight.data.copy_(weight)
    with warnings.catch_warnings():  # PEFT calls a transformers method deprecated in v5: not the reader's concern
        warnings.simplefilter("ignore", FutureWarning)
        model = get_peft_model(module, LoraConfig(r=rank, lora_alpha=alpha, target_modules=["proj"], lora_dropout=0.0))
    layer = model.base_model.model.proj
    layer.lora_A["default"].weight.data.copy_(lora_a)
    layer.lora_B["default"].weight.data.copy_(lora_b)
    return model


def check_lora_forward(fn: Callable) -> CheckResult:
    """Chapter 9. ``fn(x, weight, lora_A, lora_B, alpha, rank)``: a LoRA linear layer's output,
    ``x W^T + (alpha / rank) x A^T B^T`` (weight ``(out, in)``, ``lora_A`` ``(rank, in)``, ``lora_B``
    ``(out, rank)``), compared with PEFT's own LoRA layer."""
    generator = torch.Generator().manual_seed(3)

    def tensors(batch_shape, in_f, out_f, rank):
        return (torch.randn(*batch_shape, in_f, generator=generator), torch.randn(out_f, in_f, generator=generator),
                torch.randn(rank, in_f, generator=generator), torch.randn(out_f, rank, generator=generator))

    cases = [("rank 4, alpha 8, a batch of vectors", tensors((3,), 6, 5, 4), 8.0, 4),
             ("rank 2, alpha 32 (a strong adapter), a batch of sequences", tensors((2, 3), 6, 4, 2), 32.0, 2),
             ("B = 0, as LoRA starts: the base layer's output",
              tuple(t if i != 3 else torch.zeros_like(t) for i, t in enumerate(tensors((3,), 5, 5, 3))), 6.0, 3)]

    def case(parts, alpha, rank):
        def run() -> str | None:
            x, weight, lora_a, lora_b = parts
            with torch.no_grad():
                expected = _peft_linear(weight, lora_a, lora_b, alpha, rank)(x)
            got = _call(fn, x.clone(), weight.clone(), lora_a.clone(), lora_b.clone(), alpha, rank)
            if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
                shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                return f"expected a tensor of shape {tuple(expected.shape)}, got {shape}"
            got = got.detach().float()
            if torch.allclose(got, expected, atol=1e-4, rtol=1e-4):
                return None
            delta = x @ lora_a.T @ lora_b.T
            base = x @ weight.T
            if torch.allclose(got, base + alpha * delta, atol=1e-4, rtol=1e-4):
                return "PEFT scales the adapter's output by alpha / rank, not alpha"
            if torch.allclose(got, delta * alpha / rank, atol=1e-4, rtol=1e-4):
                return "add the frozen layer's own output: y = x W^T + (alpha / rank) x A^T B^T"
            return f"differs from PEFT's output by up to {float((got - expected).abs().max()):.4g}"

        return run

    return _run("check_lora_forward", [(label, case(*args)) for label, *args in cases])


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config)


def check_lora_parameter_count(fn: Callable) -> CheckResult:
    """Chapter 9. ``fn(shapes, rank)``: the trainable parameters of rank-``rank`` adapters on linear
    layers of the given ``(out_features, in_features)`` shapes, compared with PEFT's count on a small
    Llama-style model (grouped-query attention, so not every projection is square)."""
    from peft import LoraConfig, get_peft_model

    def on_model(rank: int):
        def run() -> str | None:
            model = _tiny_llama()
            targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
            shapes = [(m.out_features, m.in_features) for n, m in model.named_modules()
                      if isinstance(m, torch.nn.Linear) and n.rsplit(".", 1)[-1] in targets]
            with warnings.catch_warnings():  # PEFT calls a transformers method deprecated in v5: not the reader's concern
                warnings.simplefilter("ignore", FutureWarning)
                peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets))
            expected = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
            got = _call(fn, list(shapes), rank)
            if got == expected:
                return None
            if got == sum(o * i for o, i in shapes) * rank or got == sum(o * i for o, i in shapes):
                return (f"expected {expected}, got {got}: an adapter is two thin matrices, A (rank x in) and B "
                        "(out x rank): rank * (in + out) per layer, not a full out x in matrix")
            return f"expected {expected} (PEFT's count on {len(shapes)} layers), got {got}"

        return run

    def simple():
        got = _call(fn, [(4, 3)], 2)
        return None if got == 14 else f"one 4 x 3 layer at rank 2 has A (2 x 3) and B (4 x 2): 14 parameters; got {got}"

    return _run("check_lora_parameter_count", [("one 4 x 3 layer at rank 2", simple),
                                               ("every projection of a small Llama at rank 8", on_model(8)),
                                               ("the same at rank 1", on_model(1))])
