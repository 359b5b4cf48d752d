"""Single-turn math word problems, GSM8K style (chapter 1; trained on in chapters 6-7).

The model reads a word problem and writes a worked answer that ends ``#### <number>``. Reward, as in
the GSM8K PPO tutorial: 1.0 for the right number, 0.1 for the right *format* with a wrong number,
0.0 when there is no ``####`` answer at all. Two sources of problems:

* ``"generated"`` (offline, the ``ci`` preset): arithmetic word problems from templates, seeded,
  at three difficulty levels (one, two or three operations), each with a worked solution;
* ``"gsm8k"`` (the ``full`` preset): the real GSM8K through ``datasets``, which needs the Hugging
  Face Hub. :func:`load_gsm8k` is the only place that touches the network.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from tutorial_lib.envs.base import StepResult, TextEnv
from tutorial_lib.envs.parsing import parse_final_answer

CORRECT_REWARD = 1.0
FORMAT_REWARD = 0.1
LEVELS = (1, 2, 3)


@dataclass(frozen=True)
class MathProblem:
    """A question, its worked solution (ending ``#### answer``) and the numeric answer."""

    question: str
    solution: str
    answer: Fraction


# -- the offline generator -----------------------------------------------------------------------
_NAMES = ["Ava", "Ben", "Chloe", "Dev", "Elif", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Kemi", "Liam"]
_ITEMS = ["apples", "books", "marbles", "stickers", "pencils", "cookies", "cards", "shells"]
_CONTAINERS = ["box", "bag", "jar", "crate", "basket"]


def _level1(rng: random.Random) -> tuple[str, list[str], int]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    a, b = rng.randint(5, 60), rng.randint(2, 40)
    if rng.random() < 0.5:
        question = f"{name} has {a} {item}. {name} gets {b} more. How many {item} does {name} have now?"
        return question, [f"{name} has {a} + {b} = {a + b} {item}."], a + b
    a += b  # keep the difference positive
    question = f"{name} has {a} {item} and gives away {b}. How many {item} are left?"
    return question, [f"{a} - {b} = {a - b} {item} are left."], a - b


def _level2(rng: random.Random) -> tuple[str, list[str], int]:
    name, item, box = rng.choice(_NAMES), rng.choice(_ITEMS), rng.choice(_CONTAINERS)
    per, count, loose = rng.randint(2, 12), rng.randint(2, 9), rng.randint(1, 20)
    question = (
        f"A {box} holds {per} {item}. {name} buys {count} {box}s and {loose} more {item}. "
        f"How many {item} does {name} have?"
    )
    steps = [
        f"{count} {box}s hold {count} * {per} = {count * per} {item}.",
        f"With {loose} more, {name} has {count * per} + {loose} = {count * per + loose} {item}.",
    ]
    return question, steps, count * per + loose


def _level3(rng: random.Random) -> tuple[str, list[str], int]:
    name = rng.choice(_NAMES)
    rate, hours, days = rng.randint(5, 25), rng.randint(2, 8), rng.randint(2, 6)
    spent = rng.randint(1, rate * hours * days - 1)
    earned_day, earned = rate * hours, rate * hours * days
    question = (
        f"{name} earns ${rate} an hour and works {hours} hours a day for {days} days, "
        f"then spends ${spent}. How many dollars does {name} have left?"
    )
    steps = [
        f"Each day {name} earns {rate} * {hours} = {earned_day} dollars.",
        f"Over {days} days that is {earned_day} * {days} = {earned} dollars.",
        f"After spending {spent}, {name} has {earned} - {spent} = {earned - spent} dollars.",
    ]
    return question, steps, earned - spent


_GENERATORS: dict[int, Callable[[random.Random], tuple[str, list[str], int]]] = {
    1: _level1,
    2: _level2,
    3: _level3,
}


def generate_problem(seed: int, level: int | str = "mixed", split: str = "train") -> MathProblem:
    """The problem for ``(seed, level, split)``; train and test draw from different random streams."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"math/{split}/{level}/{seed}")
    if level == "mixed":
        level = rng.choice(LEVELS)
    if level not in _GENERATORS:
        raise ValueError(f"unknown level {level!r}; choose one of {list(LEVELS)} or 'mixed'")
    question, steps, answer = _GENERATORS[level](rng)
    return MathProblem(question, "\n".join(steps) + f"\n#### {answer}", Fraction(answer))


# -- GSM8K through `datasets` --------------------------------------------------------------------
GSM8K_DATASET = ("openai/gsm8k", "main")


def gsm8k_record_to_problem(record: dict[str, str]) -> MathProblem:
    """Turn one GSM8K row (``question``, ``answer`` ending ``#### 72``) into a :class:`MathProblem`."""
    parsed = parse_final_answer(record["answer"])
    if not parsed.ok:
        raise ValueError(f"GSM8K answer without a final '#### number': {record['answer'][-80:]!r}")
    return MathProblem(record["question"], record["answer"], parsed.value)


def load_gsm8k(split: str = "train", limit: int | None = None) -> list[MathProblem]:
    """Load GSM8K from the Hugging Face Hub. Needs network; offline, use ``source="generated"``."""
    import datasets

    try:
        rows = datasets.load_dataset(*GSM8K_DATASET, split=split)
    except Exception as exc:  # the Hub raises several kinds of errors when it cannot be reached
        raise RuntimeError(
            f"could not load GSM8K ({GSM8K_DATASET[0]}) from the Hugging Face Hub: {exc}. "
            "Without network use make('math', source='generated'), the offline generator "
            "(the ci preset does this)."
        ) from exc
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    return [gsm8k_record_to_problem(row) for row in rows]


class MathEnv(TextEnv):
    """One problem per episode; one answer; reward 1.0 / 0.1 / 0.0."""

    name = "math"

    def __init__(
        self,
        source: str = "generated",
        *,
        level: int | str = "mixed",
        split: str = "train",
        problems: list[MathProblem] | None = None,
    ) -> None:
        super().__init__()
        if source not in ("generated", "gsm8k"):
            raise ValueError(f"source must be 'generated' or 'gsm8k', got {source!r}")
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if level != "mixed" and level not in LEVELS:
            raise ValueError(f"unknown level {level!r}; choose one of {list(LEVELS)} or 'mixed'")
        self.source, self.level, self.split = source, level, split
        if problems is None and source == "gsm8k":
            problems = load_gsm8k(split)
        if problems is not None and not problems:
            raise ValueError("problems is empty")
        self.problems = problems
        self.problem = generate_problem(0, level, split)

    @property
    def task(self) -> str:
        return (
            "Solve the math word problem. Show your working, then write the final answer as a "
            "number on its own line after '####', for example '#### 42'."
        )

    def _reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        index = seed if seed is not None else self._rng.randrange(2**31)
        if self.problems is not None:
            self.problem = self.problems[index % len(self.problems)]
        else:
            self.problem = generate_problem(index, self.level, self.split)
        return self.problem.question, {}

    def _step(self, action_text: str) -> StepResult:
        parsed = parse_final_answer(action_text)
        correct = parsed.ok and parsed.value == self.problem.answer
        reward = CORRECT_REWARD if correct else FORMAT_REWARD if parsed.ok else 0.0
        info = dict(
            correct=correct,
            formatted=parsed.ok,
            success=correct,
            answer=str(self.problem.answer),
            invalid_action=not parsed.ok,
            parse_error=parsed.error,
        )
        verdict = "Correct." if correct else f"Wrong. The answer is {self.problem.answer}."
        return verdict, reward, True, False, info

    def expert_action(self) -> str:
        """The worked solution that came with the problem."""
        return self.problem.solution

    def random_action(self, rng: random.Random) -> str:
        return f"#### {rng.randint(0, 100)}"
