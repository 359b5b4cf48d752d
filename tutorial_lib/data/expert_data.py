"""Expert demonstrations for supervised fine-tuning (chapter 3, *Expert data*).

Every game's data ends up in one format, a list of *examples*:

    {"game": "tictactoe", "prompt": "<the user message>", "completion": "<move>x(1,1)</move>", ...}

where ``prompt`` is built by :mod:`tutorial_lib.lm.prompts` exactly as the policy will see it when it
plays, and ``completion`` is the expert's action text. Sources:

* **tic-tac-toe** -- MCTS self-play with the OpenSpiel tutorial's settings (UCT constant 2*sqrt(2),
  1000 simulations per move, random-rollout evaluator, epsilon-greedy exploration 0.1). Every move
  of both players becomes a record (board text, mark, legal moves, MCTS's move). With probability
  epsilon a random legal move is *played* instead, to visit more positions, but the record keeps
  MCTS's choice as the label: the data never teaches a random move. Each record also says whether
  MCTS's move is optimal (minimax), which measures the data's quality.
* **CookingWorld** -- the gold path of train-fold games (never test), as in the TextWorld tutorial;
  optionally with *recovery data*: before some gold actions an invalid command is played (it
  changes nothing), so the data shows what to do after a mistake (:class:`ExpertWithMistakes`),
  and with *counterfactual recipes*: episodes rewritten with the ways to cut and cook permuted, so
  only the recipe tells the verb (:func:`counterfactual_recipes`).
* **GuessTheNumber** -- binary-search transcripts.
* **math** -- the generator's worked solutions (or GSM8K's, at the ``full`` preset).

Examples are saved as JSON lines and load as a ``datasets.Dataset``.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tutorial_lib import envs
from tutorial_lib.envs.minimax import minimax_actions
from tutorial_lib.envs.tictactoe import board_text, task_text
from tutorial_lib.envs.tictactoe import worked_lines as lines_text
from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.lm.policies import ExpertPolicy
from tutorial_lib.lm.prompts import Turn, build_prompt_text
from tutorial_lib.runtime.durable import write_text
from tutorial_lib.runtime.progress import progress_bar


@dataclass(frozen=True)
class SelfPlayConfig:
    """MCTS self-play settings; the defaults are the OpenSpiel tutorial's."""

    #: games to play
    episodes: int = 1000
    #: MCTS simulations per move
    simulations: int = 1000
    #: UCT exploration constant
    uct_c: float = 2 * math.sqrt(2)
    #: probability of playing a uniformly random legal move instead of MCTS's (exploration)
    epsilon: float = 0.1
    #: random rollouts per leaf evaluation
    rollouts: int = 1
    #: who MCTS plays: ``"self"`` (self-play, the tutorial's choice: both sides' moves are records)
    #: or ``"random"`` (MCTS plays x in even games and o in odd ones against uniformly random
    #: moves; only MCTS's moves are records). Self-play visits the positions two strong players
    #: reach, which a weak opponent rarely leads to; games against a random player visit the
    #: positions an evaluation against it will show (threats to block, wins to take).
    opponent: str = "self"
    seed: int = 0


def mcts_selfplay(config: SelfPlayConfig = SelfPlayConfig(), *, progress: bool = True) -> list[dict[str, Any]]:
    """Play ``config.episodes`` games of MCTS against itself; one record per move of either side."""
    import numpy as np
    import pyspiel
    from open_spiel.python.algorithms import mcts

    if config.episodes < 1 or config.simulations < 1 or not 0 <= config.epsilon <= 1:
        raise ValueError(f"need episodes >= 1, simulations >= 1 and 0 <= epsilon <= 1; got {config}")
    if config.opponent not in ("self", "random"):
        raise ValueError(f"opponent must be 'self' or 'random'; got {config.opponent!r}")
    game = pyspiel.load_game("tic_tac_toe")
    np_rng = np.random.RandomState(config.seed)
    rng = random.Random(config.seed)
    bot = mcts.MCTSBot(
        game,
        config.uct_c,
        config.simulations,
        mcts.RandomRolloutEvaluator(config.rollouts, np_rng),
        random_state=np_rng,
    )
    records: list[dict[str, Any]] = []
    desc = "MCTS self-play" if config.opponent == "self" else "MCTS vs random"
    for episode in progress_bar(range(config.episodes), desc=desc, disable=not progress):
        state = game.new_initial_state()
        turn = 0
        while not state.is_terminal():
            player = state.current_player()
            legal = state.legal_actions()
            if config.opponent == "random" and player != episode % 2:
                state.apply_action(rng.choice(legal))  # the random opponent's move: not a record
                turn += 1
                continue
            start = time.perf_counter()
            action = bot.step(state)
            seconds = time.perf_counter() - start
            explore = rng.random() < config.epsilon
            records.append(
                {
                    "episode": episode,
                    "turn": turn,
                    "board": board_text(state),
                    "mark": "x" if player == 0 else "o",
                    "legal_actions": [state.action_to_string(player, a) for a in legal],
                    "action": action,
                    "action_text": state.action_to_string(player, action),
                    "optimal": action in minimax_actions(state),
                    "explored": explore,
                    "seconds": seconds,
                }
            )
            state.apply_action(rng.choice(legal) if explore else action)
            turn += 1
    return records


# The 8 symmetries of the square (rotations and reflections) as maps of (row, col). Tic-tac-toe's
# rules are invariant under them, so a position and its best move, rotated or reflected, are
# another position and its best move: 8x more distinct training examples at no cost (the same
# augmentation AlphaGo Zero used for Go).
SYMMETRIES = [
    lambda r, c: (r, c),
    lambda r, c: (c, 2 - r),
    lambda r, c: (2 - r, 2 - c),
    lambda r, c: (2 - c, r),
    lambda r, c: (r, 2 - c),
    lambda r, c: (2 - r, c),
    lambda r, c: (c, r),
    lambda r, c: (2 - c, 2 - r),
]


def _transform_move(move: str, symmetry) -> str:
    mark, r, c = move[0], int(move[2]), int(move[4])
    r, c = symmetry(r, c)
    return f"{mark}({r},{c})"


def augment_with_symmetries(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each self-play record under all 8 symmetries of the board (duplicates removed)."""

    out, seen = [], set()
    for record in records:
        rows = [line.split() for line in record["board"].splitlines()[1:]]
        for symmetry in SYMMETRIES:
            grid = [["."] * 3 for _ in range(3)]
            for r in range(3):
                for c in range(3):
                    nr, nc = symmetry(r, c)
                    grid[nr][nc] = rows[r][c]
            board = "Board:\n" + "\n".join(" ".join(row) for row in grid)
            move = _transform_move(record["action_text"], symmetry)
            key = (board, move)
            if key in seen:
                continue
            seen.add(key)
            legal = sorted(_transform_move(m, symmetry) for m in record["legal_actions"])
            out.append({**record, "board": board, "legal_actions": legal, "action_text": move})
    return out


def tictactoe_examples(records: Iterable[dict[str, Any]], *, worked_lines: bool = False) -> list[dict[str, Any]]:
    """Self-play records as prompt/completion examples, prompts exactly as the env shows them.

    ``worked_lines``: the completion writes out the board's lines before the move
    (:func:`tutorial_lib.envs.tictactoe.worked_lines`); the move is still the expert's."""

    examples = []
    for record in records:
        turn = Turn(record["board"], info={"valid_actions": record["legal_actions"]})
        prompt = build_prompt_text("tictactoe", task_text(record["mark"]), [turn])
        move = f"<move>{record['action_text']}</move>"
        examples.append(
            {
                "game": "tictactoe",
                "prompt": prompt,
                "completion": f"{lines_text(record['board'])}\n{move}" if worked_lines else move,
                "optimal": record["optimal"],
            }
        )
    return examples


def invalid_command(valid_actions: list[str], played: list[str], rng: random.Random) -> str:
    """A plausible command that is *not* among ``valid_actions``: the kinds of mistake a small
    model makes (seen in chapter 4): an earlier command repeated when it no longer applies (``take
    cookbook`` twice), one word of a valid command swapped for another of the game's words (``take
    knife`` -> ``take fridge``), the wrong verb for an object (``slice cookbook``), or a valid
    command with a made-up location appended (``take carrot in stove``)."""
    if not valid_actions:
        raise ValueError("valid_actions is empty: nothing to corrupt")
    valid = set(valid_actions)
    words = sorted({word for action in valid_actions for word in action.split()})
    verbs = sorted({action.split()[0] for action in valid_actions} | {"slice", "dice", "chop", "cook", "take", "open"})
    for _ in range(50):
        kind = rng.random()
        if kind < 0.3 and played:
            command = rng.choice(played)
        elif kind < 0.6:
            parts = rng.choice(valid_actions).split()
            parts[rng.randrange(len(parts))] = rng.choice(words)
            command = " ".join(parts)
        elif kind < 0.8:
            command = " ".join([rng.choice(verbs), *rng.choice(valid_actions).split()[1:]])
        else:
            command = f"{rng.choice(valid_actions)} in {rng.choice(words)}"
        if command not in valid:
            return command
    return "do nothing"  # not a command of any game here; reached only with a tiny vocabulary


class ExpertWithMistakes:
    """The game's expert, with an invalid command played before some of its actions.

    Behaviour cloning sees only the expert's own states, so the first mistake of the imitator
    takes it somewhere the data never went, and small errors compound (Ross and Bagnell, 2010:
    the error of behaviour cloning grows with the square of the horizon). Injecting noise while
    the expert demonstrates puts such states in the data (DART: Laskey et al., "DART: Noise
    Injection for Robust Imitation Learning", CoRL 2017). Here the noise is an invalid command
    with probability ``rate`` before each expert action: in CookingWorld it changes nothing but
    the text (the "Invalid command" observation, and the command in the list of past actions), so
    the gold path still applies, and the example that follows teaches the way back to it. The
    invalid turns themselves never become examples.
    """

    def __init__(self, rate: float, seed: int = 0) -> None:
        if not 0 <= rate < 1:
            raise ValueError(f"rate must be in [0, 1); got {rate}")
        self.rate = rate
        self.rng = random.Random(seed)
        self.expert = ExpertPolicy()

    def act(self, episodes) -> list[str]:
        actions = self.expert.act(episodes)
        for i, episode in enumerate(episodes):
            if self.rng.random() < self.rate:
                played = [t.action for t in episode.turns[:-1] if t.action]
                actions[i] = invalid_command(episode.info["valid_actions"], played, self.rng)
        return actions


def expert_examples(
    game: str,
    seeds: Iterable[int],
    *,
    env_options: dict[str, Any] | None = None,
    history_window: int | None = None,
    mistake_rate: float = 0.0,
    seed: int = 0,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Play the game's expert on ``seeds`` and turn every move into an example.

    With ``mistake_rate`` > 0 the expert plays an invalid command before some of its moves
    (:class:`ExpertWithMistakes`; only in games whose invalid actions change nothing, see
    ``TextEnv.invalid_action_changes_nothing``: CookingWorld); those commands stay in the later
    prompts but are never a completion. ``seed`` seeds the mistakes.
    """
    if mistake_rate and not envs.env_class(game).invalid_action_changes_nothing:
        raise ValueError(f"mistake_rate needs a game where an invalid command changes nothing; {game!r} is not one")
    policy = ExpertWithMistakes(mistake_rate, seed) if mistake_rate else ExpertPolicy()
    records = run_episodes(game, policy, seeds, env_options=env_options, batch_size=1, progress=progress)
    examples = []
    for record in records:
        for turn_index, prompt in enumerate(record.prompts(history_window)):
            if record.invalid[turn_index]:
                continue  # an injected mistake: its state is in the data, never its command
            examples.append(
                {
                    "game": game,
                    "prompt": prompt,
                    "completion": record.turns[turn_index].action,
                    "seed": record.seed,
                    "turn": turn_index,
                    "mistakes_before": sum(record.invalid[:turn_index]),
                }
            )
    return examples


# -- counterfactual recipes (CookingWorld) ------------------------------------------------------
# CookingWorld's folds hold out combinations: the test games cut and cook their ingredients in ways
# no training game does (at ci, 28% of the test games' cut and cook actions, e.g. "chop cilantro"
# where every training game dices it). A model that learnt "cilantro -> dice" instead of reading
# the recipe fails there. Rewriting a training episode as if its recipe said "chop" (in the
# recipe, the actions, the observations) makes a game the data never had, and a verb that only the
# recipe can tell. The three ways to cut and the three ways to cook are each permuted; the words
# appear only in these forms in the game's text (actions start a list item or a line; the recipe
# says "slice the X"; the game answers "You slice the X." and "You fry the X with the stove.").
CUT_VERBS = ("chop", "dice", "slice")
#: cooking method -> the appliance that does it (CookingWorld's kitchen)
COOKING_METHODS = {"fry": "stove", "grill": "toaster", "roast": "oven"}
_APPLIANCE_METHOD = {appliance: method for method, appliance in COOKING_METHODS.items()}
# a verb where an action or a sentence starts: never the "chop" of "pork chop"
_VERB = re.compile(r"(^|\n|: |, |\| |You )(" + "|".join(CUT_VERBS + tuple(COOKING_METHODS)) + r")\b")
_COOK_ACTION = re.compile(r"\b(cook .+? in |with the )(" + "|".join(COOKING_METHODS.values()) + r")\b")
_VALID_LINE = re.compile(r"^(Valid actions: )(.*)$", re.M)


def rewrite_recipe(text: str, cut: dict[str, str], cook: dict[str, str]) -> str:
    """``text`` (a CookingWorld prompt or action) with cutting verbs mapped by ``cut`` and cooking
    methods by ``cook`` (each a permutation, e.g. ``{"slice": "dice", "dice": "slice", ...}``);
    the appliance in ``cook X in stove`` follows its method, and a sorted list of valid actions
    stays sorted."""
    for mapping, names in ((cut, CUT_VERBS), (cook, tuple(COOKING_METHODS))):
        if sorted(mapping) != sorted(names) or sorted(mapping.values()) != sorted(names):
            raise ValueError(f"need a permutation of {names}; got {mapping}")
    verbs = {**cut, **cook}
    text = _VERB.sub(lambda m: m.group(1) + verbs[m.group(2)], text)
    text = _COOK_ACTION.sub(lambda m: m.group(1) + COOKING_METHODS[cook[_APPLIANCE_METHOD[m.group(2)]]], text)

    def resort(m):
        actions = m.group(2).split(" | ")
        return m.group(1) + " | ".join(sorted(actions))

    return _VALID_LINE.sub(resort, text)


def _random_permutations(rng: random.Random) -> tuple[dict[str, str], dict[str, str]]:
    methods = tuple(COOKING_METHODS)
    return (dict(zip(CUT_VERBS, rng.sample(CUT_VERBS, len(CUT_VERBS)))),
            dict(zip(methods, rng.sample(methods, len(methods)))))


def _rewritten(example: dict[str, Any], cut: dict[str, str], cook: dict[str, str]) -> dict[str, Any]:
    swap = " ".join(f"{a}->{b}" for a, b in {**cut, **cook}.items() if a != b)
    return {**example, "prompt": rewrite_recipe(example["prompt"], cut, cook),
            "completion": rewrite_recipe(example["completion"], cut, cook), "recipe_swap": swap}


def recipe_permutations(swap: str) -> tuple[dict[str, str], dict[str, str]]:
    """The (cut, cook) permutations an example's ``recipe_swap`` names (``""``: none), for
    :func:`rewrite_recipe`: e.g. to compare a prompt the game shows with the rewritten one."""
    cut, cook = dict(zip(CUT_VERBS, CUT_VERBS)), dict(zip(COOKING_METHODS, COOKING_METHODS))
    for pair in swap.split():
        old, _, new = pair.partition("->")
        (cut if old in cut else cook)[old] = new
    return cut, cook


def is_recipe_step(action: str) -> bool:
    """Whether ``action`` cuts or cooks: the steps whose verb only the recipe can tell."""
    verb = action.split(" ", 1)[0]
    return verb in CUT_VERBS or verb == "cook"


def counterfactual_recipes(examples: list[dict[str, Any]], seed: int = 0, step_copies: int = 0) -> list[dict[str, Any]]:
    """Each CookingWorld episode (the examples sharing a ``seed``) rewritten under its own random
    permutation of the cutting verbs and of the cooking methods (:func:`rewrite_recipe`; the
    identity is one of the 36). The cut and cook steps, where the recipe alone decides the action
    and which are ~2 of an episode's ~11 examples, also appear ``step_copies`` more times, each
    under another random permutation, right after the example. Episodes whose text names an
    appliance this does not know (a barbecue, in larger worlds) are kept as they are. Every
    example gains ``recipe_swap``: the verbs that changed, e.g. ``"slice->dice fry->roast"``, or
    ``""``."""
    if step_copies < 0:
        raise ValueError(f"step_copies must be >= 0; got {step_copies}")
    rng = random.Random(seed)
    identity = recipe_permutations("")
    unknown = {e["seed"] for e in examples if re.search(r"barbe|bbq", e["prompt"], re.I)}
    by_episode: dict[Any, tuple[dict, dict]] = {}
    out = []
    for example in examples:
        if example["seed"] not in by_episode:
            # drawn for a kept episode too, so that which episodes are kept does not shift the
            # permutations every later episode gets
            permutations = _random_permutations(rng)
            by_episode[example["seed"]] = identity if example["seed"] in unknown else permutations
        out.append(_rewritten(example, *by_episode[example["seed"]]))
        if example["seed"] not in unknown and is_recipe_step(example["completion"]):
            out.extend(_rewritten(example, *_random_permutations(rng)) for _ in range(step_copies))
    return out


def save_examples(examples: list[dict[str, Any]], path: str | Path) -> Path:
    """Write examples as JSON lines (one example a line), whole: a chapter running beside another
    (make book) that reads the same cached file sees all of it or none of it."""
    return write_text(path, "".join(json.dumps(example) + "\n" for example in examples))


def load_examples(path: str | Path):
    """A ``datasets.Dataset`` of the examples in a JSON-lines file written by :func:`save_examples`."""
    import datasets

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no expert data at {path}; make it with: python -m tutorial_lib data --out DIR")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:  # cut short or overwritten by something else: this library writes it whole
            raise ValueError(f"{path}, line {number}, is not a whole example ({error}): the file is damaged; "
                             "delete it (a chapter makes it again) or make it anew with "
                             "`python -m tutorial_lib data`") from error
    if not rows:
        raise ValueError(f"{path} holds no examples")
    return datasets.Dataset.from_list(rows)
