"""The exercises' checks: each passes a right answer, fails the common wrong ones with a message that
names the mistake, and never raises; and every solution in the book passes its check."""

from __future__ import annotations

import math
import re

import jupytext
import pytest
import torch

from tutorial_lib import exercises as ex
from tutorial_lib.book_tools.book import chapter_sources
from tutorial_lib.rl import advantages

# -- right answers, written as a reader would ---------------------------------------------------------

def encode(prompt_ids, completion_ids, eos_id, max_length=None):
    if not completion_ids or completion_ids[-1] != eos_id:
        completion_ids = completion_ids + [eos_id]
    if max_length is not None:
        prompt_ids = prompt_ids[len(prompt_ids) + len(completion_ids) - max_length:] if \
            len(prompt_ids) + len(completion_ids) > max_length else prompt_ids
    return {"input_ids": prompt_ids + completion_ids, "labels": [-100] * len(prompt_ids) + completion_ids}


def parse(text):
    match = re.search(r"<move>\s*([xo])\s*\(\s*(\d{1,6})\s*,\s*(\d{1,6})\s*\)\s*</move>", text, re.I) or \
        re.search(r"\b([xo])\s*\(\s*(\d{1,6})\s*,\s*(\d{1,6})\s*\)", text, re.I)
    return None if match is None else f"{match.group(1).lower()}({int(match.group(2))},{int(match.group(3))})"


def sft_loss(logits, labels):
    targets = labels[:, 1:]
    keep = targets != -100
    return torch.nn.functional.cross_entropy(logits[:, :-1][keep], targets[keep])


def returns(rewards, gamma, bootstrap=0.0):
    out, running = [], bootstrap
    for r in reversed(rewards):
        running = r + gamma * running
        out.append(running)
    return out[::-1]


def rebn(returns_per_episode):
    flat = [g for e in returns_per_episode for g in e]
    if not flat:
        return [[] for _ in returns_per_episode]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((g - mean) ** 2 for g in flat) / len(flat))
    return [[(g - mean) / (std if std > 1e-8 else 1.0) for g in e] for e in returns_per_episode]


def state_baseline(returns_per_episode, states_per_episode):
    flat = [g for e in returns_per_episode for g in e]
    keys = [k for e in states_per_episode for k in e]
    mean = sum(flat) / len(flat)
    groups = {}
    for k, g in zip(keys, flat):
        groups.setdefault(k, []).append(g)
    centred = [g - (sum(groups[k]) / len(groups[k]) if len(groups[k]) > 1 else mean) for k, g in zip(keys, flat)]
    std = math.sqrt(sum(c * c for c in centred) / len(centred))
    it = iter(c / (std if std > 1e-8 else 1.0) for c in centred)
    return [[next(it) for _ in e] for e in returns_per_episode]


def gae(rewards, values, gamma, lam, last_value=0.0, terminated=True):
    nxt, running, adv = (0.0 if terminated else last_value), 0.0, [0.0] * len(rewards)
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * nxt - values[t] + gamma * lam * running
        adv[t], nxt = running, values[t]
    return adv, [a + v for a, v in zip(adv, values)]


def surrogate(logprobs, old_logprobs, advantages, mask, clip_range):
    ratio = torch.exp(logprobs - old_logprobs)
    loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_range, 1 + clip_range))
    return loss[mask].mean()


def group_advantage(rewards, group_size, scale=True):
    out = []
    for i in range(0, len(rewards), group_size):
        g = rewards[i:i + group_size]
        m = sum(g) / len(g)
        s = math.sqrt(sum((r - m) ** 2 for r in g) / (len(g) - 1)) if len(g) > 1 else 0.0
        out.extend((r - m) / (s + 1e-6) if scale and s > 0 else r - m for r in g)
    return out


def k3(logprobs, ref_logprobs, mask):
    log_r = ref_logprobs - logprobs
    return (log_r.exp() - 1 - log_r)[mask].mean()


def two_se(before, after, episodes):
    def var(p):
        p = min(max(p, 0.5 / episodes), 1 - 0.5 / episodes)
        return p * (1 - p) / episodes
    return 2 * math.sqrt(var(before) + var(after))


def lora_forward(x, weight, lora_A, lora_B, alpha, rank):
    return x @ weight.T + (alpha / rank) * (x @ lora_A.T @ lora_B.T)


def lora_count(shapes, rank):
    return sum(rank * (out + inp) for out, inp in shapes)


RIGHT = [
    (ex.check_labels, encode), (ex.check_move_parser, parse),
    (ex.check_binary_search, lambda low, high: (low + high) // 2), (ex.check_sft_loss, sft_loss),
    (ex.check_discounted_returns, returns), (ex.check_rebn, rebn), (ex.check_state_baseline, state_baseline),
    (ex.check_gae, gae), (ex.check_clipped_surrogate, surrogate), (ex.check_group_advantage, group_advantage),
    (ex.check_k3, k3), (ex.check_two_standard_errors, two_se), (ex.check_lora_forward, lora_forward),
    (ex.check_lora_parameter_count, lora_count),
]


@pytest.mark.parametrize("check, answer", RIGHT, ids=[c.__name__ for c, _ in RIGHT])
def test_a_right_answer_passes(check, answer):
    result = check(answer)
    assert result.passed, repr(result)
    assert repr(result).startswith("passed:")


@pytest.mark.parametrize("check", [c for c, _ in RIGHT], ids=[c.__name__ for c, _ in RIGHT])
def test_a_stub_is_told_to_write_its_body_and_nothing_raises(check):
    def stub(*args, **kwargs):
        raise NotImplementedError

    result = check(stub)
    assert not result.passed and "NotImplementedError" in repr(result)
    garbage = check(lambda *args, **kwargs: "garbage")
    assert not garbage.passed


# -- the common mistakes, each named by its check ------------------------------------------------------

def _fails_with(result, *words):
    assert not result.passed, f"a wrong answer passed: {result!r}"
    text = repr(result)
    for word in words:
        assert word in text, f"{word!r} missing from {text}"


def test_labels_mistakes():
    _fails_with(ex.check_labels(lambda p, c, e, max_length=None: {"input_ids": p + c + [e], "labels": p + c + [e]}),
                "-100")
    _fails_with(ex.check_labels(lambda p, c, e, max_length=None: {"input_ids": p + c,
                                                                   "labels": [-100] * len(p) + c}), "eos")

    def keeps_the_start(p, c, e, max_length=None):
        c = c if c and c[-1] == e else c + [e]
        if max_length is not None:
            p = p[: max_length - len(c)]
        return {"input_ids": p + c, "labels": [-100] * len(p) + c}

    _fails_with(ex.check_labels(keeps_the_start), "from the left")


def test_parser_that_raises_is_told_never_to():
    def naive(text):
        m = re.search(r"([xo])\((\d+),(\d+)\)", text)
        return None if m is None else f"{m.group(1)}({int(m.group(2))},{int(m.group(3))})"

    _fails_with(ex.check_move_parser(naive), "never raises")


def test_binary_search_mistakes():
    _fails_with(ex.check_binary_search(lambda low, high: low), "not found in")
    _fails_with(ex.check_binary_search(lambda low, high: high + 1), "outside")


def test_the_buggy_sft_loss_is_caught_and_named():
    _fails_with(ex.check_sft_loss(ex.sft_loss_with_a_bug), "t + 1")


def test_sft_loss_mistakes():
    def summed(logits, labels):
        t = labels[:, 1:]
        k = t != -100
        return torch.nn.functional.cross_entropy(logits[:, :-1][k], t[k], reduction="sum")

    def row_means(logits, labels):
        t = labels[:, 1:]
        out = [torch.nn.functional.cross_entropy(logits[i, :-1][t[i] != -100], t[i][t[i] != -100])
               for i in range(len(t)) if (t[i] != -100).any()]
        return torch.stack(out).mean()

    _fails_with(ex.check_sft_loss(summed), "sum")
    _fails_with(ex.check_sft_loss(row_means), "rows' means")


def test_returns_mistakes():
    _fails_with(ex.check_discounted_returns(lambda r, g, bootstrap=0.0: returns(r, g)), "bootstrap")
    _fails_with(ex.check_discounted_returns(lambda r, g, bootstrap=0.0: list(r)), "expected")


def test_rebn_mistakes():
    def sample_std(rets):
        flat = [g for e in rets for g in e]
        m = sum(flat) / len(flat)
        s = math.sqrt(sum((g - m) ** 2 for g in flat) / (len(flat) - 1)) if len(flat) > 1 else 0
        return [[(g - m) / s for g in e] for e in rets]

    _fails_with(ex.check_rebn(sample_std), "population std")

    def per_episode(rets):
        out = []
        for e in rets:
            m = sum(e) / len(e) if e else 0
            s = math.sqrt(sum((g - m) ** 2 for g in e) / len(e)) if e else 1
            out.append([(g - m) / (s or 1.0) for g in e])
        return out

    _fails_with(ex.check_rebn(per_episode), "not per episode")

    def divides_by_zero(rets):
        flat = [g for e in rets for g in e]
        m = sum(flat) / len(flat)
        s = math.sqrt(sum((g - m) ** 2 for g in flat) / len(flat))
        return [[(g - m) / s if s else float("nan") for g in e] for e in rets]

    _fails_with(ex.check_rebn(divides_by_zero), "zeros")


def test_state_baseline_mistake():
    _fails_with(ex.check_state_baseline(lambda r, s: advantages.rebn(r)), "same state")


def test_gae_mistakes():
    _fails_with(ex.check_gae(lambda r, v, g, lam, last_value=0.0, terminated=True: gae(r, v, g, lam)),
                "bootstrap from V(s_T)")
    _fails_with(ex.check_gae(lambda r, v, g, lam, last_value=0.0, terminated=True:
                             (gae(r, v, g, lam, last_value, terminated)[0],) * 2), "advantages + values")


def test_surrogate_mistakes():
    def optimistic(lp, old, adv, mask, eps):
        r = torch.exp(lp - old)
        return torch.min(-adv * r, -adv * r.clamp(1 - eps, 1 + eps))[mask].mean()

    def unmasked(lp, old, adv, mask, eps):
        r = torch.exp(lp - old)
        return torch.max(-adv * r, -adv * r.clamp(1 - eps, 1 + eps)).mean()

    def detached(lp, old, adv, mask, eps):
        return surrogate(lp, old, adv, mask, eps).detach()

    _fails_with(ex.check_clipped_surrogate(optimistic), "pessimistic")
    _fails_with(ex.check_clipped_surrogate(unmasked), "mask")
    _fails_with(ex.check_clipped_surrogate(detached), "no gradient")


def test_group_advantage_mistakes():
    def population(rewards, n, scale=True):
        out = []
        for i in range(0, len(rewards), n):
            g = rewards[i:i + n]
            m = sum(g) / n
            s = math.sqrt(sum((r - m) ** 2 for r in g) / n)
            out.extend((r - m) / s if s else 0.0 for r in g)
        return out

    _fails_with(ex.check_group_advantage(population), "unbiased")
    _fails_with(ex.check_group_advantage(lambda r, n, scale=True: [x - sum(r) / len(r) for x in r]), "own group")


def test_k3_mistakes():
    _fails_with(ex.check_k3(lambda lp, ref, m: (lp - ref)[m].mean()), "k1")
    _fails_with(ex.check_k3(lambda lp, ref, m: k3(ref, lp, m)), "ref/pi")
    _fails_with(ex.check_k3(lambda lp, ref, m: ((ref - lp).exp() - 1 - (ref - lp)).mean()), "masked")


def test_two_standard_errors_mistakes():
    _fails_with(ex.check_two_standard_errors(lambda b, a, n: two_se(b, a, n) / 2), "one standard error")
    _fails_with(ex.check_two_standard_errors(
        lambda b, a, n: 2 * math.sqrt(b * (1 - b) / n + a * (1 - a) / n)), "half a game")


def test_lora_mistakes():
    _fails_with(ex.check_lora_forward(lambda x, w, a, b, alpha, r: x @ w.T + alpha * (x @ a.T @ b.T)), "alpha / rank")
    _fails_with(ex.check_lora_forward(lambda x, w, a, b, alpha, r: (alpha / r) * (x @ a.T @ b.T)), "frozen")
    _fails_with(ex.check_lora_parameter_count(lambda shapes, r: sum(o * i for o, i in shapes)), "thin matrices")


def test_prediction():
    assert ex.check_prediction("up", 0.55, 0.90, 200).passed
    assert ex.check_prediction("same", 0.55, 0.57, 200).passed
    _fails_with(ex.check_prediction("up", 0.55, 0.57, 200), "'same'")
    _fails_with(ex.check_prediction("higher", 0.5, 0.6, 100), "'up'")


# -- every solution in the book passes its check ------------------------------------------------------

def _exercise_sections():
    """Each chapter's "Exercises" section: its code cells in order, and which of them are solutions to
    code exercises (hidden-input cells that call a check on a function). A "predict, then run" exercise
    (``check_prediction``) reads the chapter's own run, so the build checks it instead (``book
    check-html``: no hidden solution may end on "not yet")."""
    for path in chapter_sources():
        cells, inside = [], False
        for cell in jupytext.read(path).cells:
            if cell.cell_type == "markdown" and re.search(r"^## ", cell.source, re.M):
                inside = bool(re.search(r"^## Exercises", cell.source, re.M))
            if inside and cell.cell_type == "code" and "check_prediction(" not in cell.source:
                solution = ("hide-input" in cell.metadata.get("tags", [])
                            and bool(re.search(r"^\s*(?:print\()?check_\w+\(", cell.source, re.M)))
                cells.append((cell.source, solution))
        if any(solution for _, solution in cells):
            yield pytest.param(cells, id=path.stem)


SECTIONS = list(_exercise_sections())


@pytest.mark.parametrize("cells", SECTIONS or [pytest.param([], marks=pytest.mark.skip("no exercises yet"))])
def test_every_book_solution_passes_its_check(cells, monkeypatch):
    """A chapter's exercises run here as in the book, in order; a solution needs nothing from the chapter
    before them but its imports of torch and math (a diagnostic cell on the chapter's own run may, and
    is left to the build). The last check each solution calls must pass."""
    results = []
    for name in [n for n in ex.__all__ if n.startswith("check_")]:
        check = getattr(ex, name)
        monkeypatch.setattr(ex, name, lambda *a, _check=check, **k: results.append(_check(*a, **k)) or results[-1])
    namespace: dict = {"torch": torch, "math": math, "F": torch.nn.functional}
    exec("from tutorial_lib.exercises import *", namespace)  # noqa: S102
    solved = 0
    for source, solution in cells:
        results.clear()
        try:
            exec(compile(source, "<exercise cell>", "exec"), namespace)  # noqa: S102 - the book's own cell
        except NameError:
            if solution:
                raise
            continue  # a diagnostic on the chapter's own run (its model, its batch): the build runs it
        if solution:
            assert results, f"this solution called no check:\n{source}"
            assert results[-1].passed, f"{results[-1]!r}\n{source}"
            solved += 1
    assert solved >= 1
