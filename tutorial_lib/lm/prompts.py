"""Prompt templates: what the policy reads at each turn (chapter 2, *Prompts, tokens and actions*).

Every game is played through the same single-message prompt, built from the episode so far:

    <task: the game's instructions>

    Remembered:                 <- a past observation worth keeping (CookingWorld: the recipe)
    Your actions so far: a, b   <- the last `action_history` actions, compactly
    Recent turns:               <- the last `history_window` (observation, action) pairs
    > <action>
    <observation>
    ...
    Now:
    <current observation>

    Valid actions: a | b | c    <- only for games with a finite action set

A history *window* rather than the whole episode is the TextWorld tutorial's choice: it bounds the
prompt length (and so the cost of every forward pass) however long the episode runs. Markov games
(tic-tac-toe: the board says everything) use a window of 0; GuessTheNumber keeps every turn,
since each piece of feedback narrows the range.

Why CookingWorld lists its past *actions* and remembers the recipe, rather than showing a long
window of observations: the next step of a plan depends on what has been done (which containers
were already opened) and on the recipe (read once, near the start). Both fit in a few dozen
tokens, while the observations that carry them run to hundreds; a window long enough to keep the
cookbook in view would make every prompt several times longer. Chapter 4 measures the difference.

Data collection, training and evaluation must all build prompts with the same function and the same
window, or the model is evaluated on text it never saw (chapter 8 measures that mismatch). For
that measurement, ``spec=`` builds a prompt with another :class:`PromptSpec` than the game's
(``LanguagePolicy(prompt_spec=...)`` plays with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Turn:
    """One turn of an episode: what the agent saw (with the game's ``info``), and what it then wrote
    (``None`` until it acts)."""

    observation: str
    action: str | None = None
    info: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class PromptSpec:
    """How one game's prompt is built."""

    #: how many past (observation, action) pairs to show
    history_window: int
    #: whether to list ``info["valid_actions"]``
    list_valid_actions: bool
    #: a reminder of the answer format, placed last (closest to where the model writes)
    answer_format: str
    #: how many past actions to list compactly (0: none)
    action_history: int = 0
    #: the latest past observation starting with this text is kept in the prompt ("Remembered:")
    remember_prefix: str | None = None
    #: list the valid actions *before* the current observation, so the observation ends the prompt
    #: at a fixed distance from the answer (see ``PROMPT_SPECS["tictactoe"]``)
    actions_first: bool = False


PROMPT_SPECS: dict[str, PromptSpec] = {
    "tictactoe": PromptSpec(0, True, "Answer as <move>mark(row,col)</move>.", actions_first=True),
    "cookingworld": PromptSpec(
        history_window=0,
        list_valid_actions=True,
        answer_format="Answer with one valid action.",
        action_history=32,
        remember_prefix="Gather all following ingredients",  # the cookbook's text: the recipe
    ),
    "guess_the_number": PromptSpec(10, False, "Answer as \\boxed{N}."),
    "math": PromptSpec(0, False, "End with the answer after ####."),
}


def prompt_spec(game: str) -> PromptSpec:
    if game not in PROMPT_SPECS:
        raise ValueError(f"no prompt template for {game!r}; known: {', '.join(PROMPT_SPECS)}")
    return PROMPT_SPECS[game]


def build_prompt_text(
    game: str,
    task: str,
    turns: Sequence[Turn],
    info: dict[str, Any] | None = None,
    *,
    history_window: int | None = None,
    spec: PromptSpec | None = None,
) -> str:
    """The user-message text for the *last* turn of ``turns`` (whose action is still to be chosen).

    ``info`` defaults to that turn's own ``info`` (where the valid actions come from). ``spec``
    replaces the game's :class:`PromptSpec` (chapter 8 evaluates a policy on prompts built
    differently from its training data); ``history_window``, if given, overrides the spec's window.
    """
    if not turns:
        raise ValueError("turns is empty: a prompt needs at least the current observation")
    spec = prompt_spec(game) if spec is None else spec
    window = spec.history_window if history_window is None else history_window
    if window < 0:
        raise ValueError(f"history_window must be >= 0, got {window}")
    past, current = list(turns[:-1]), turns[-1]
    parts = [task.strip()]
    if spec.remember_prefix:
        kept = [t.observation for t in past if t.observation.strip().startswith(spec.remember_prefix)]
        if kept:
            parts.append("Remembered:\n" + kept[-1].strip())
    if spec.action_history:
        actions = [(t.action or "").strip() for t in past[-spec.action_history :]]
        parts.append("Your actions so far: " + (", ".join(actions) if actions else "none"))
    recent = past[-window:] if window else []
    if recent:
        lines = ["Recent turns:"]
        for turn in recent:
            lines.append(turn.observation.strip())
            lines.append(f"> {(turn.action or '').strip()}")
        parts.append("\n".join(lines))
    observation = f"Now:\n{current.observation.strip()}" if recent else current.observation.strip()
    valid = (current.info if info is None else info).get("valid_actions")
    listed = ["Valid actions: " + " | ".join(valid)] if spec.list_valid_actions and valid else []
    parts.extend(listed + [observation] if spec.actions_first else [observation] + listed)
    parts.append(spec.answer_format)
    return "\n\n".join(parts)


def build_messages(
    game: str,
    task: str,
    turns: Sequence[Turn],
    info: dict[str, Any] | None = None,
    *,
    history_window: int | None = None,
    spec: PromptSpec | None = None,
) -> list[dict[str, str]]:
    """The prompt as chat messages, ready for ``tokenizer.apply_chat_template``."""
    text = build_prompt_text(game, task, turns, info, history_window=history_window, spec=spec)
    return [{"role": "user", "content": text}]


def render_chat(tokenizer, messages: list[dict[str, str]]) -> str:
    """The exact string the model reads: the chat template applied, ending where the answer starts."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
