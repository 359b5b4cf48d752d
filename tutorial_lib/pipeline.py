"""Chapter-to-chapter results, cached by configuration (chapters 3-4 and later).

Colab opens one chapter at a time, so a chapter that needs an earlier chapter's result (the expert
data of chapter 3, the SFT checkpoint of chapter 4) gets it from here: looked up in the cache
under a key made from every setting that produced it, and recomputed when the cache has none.

    examples = expert_data("tictactoe", preset)       # chapter 3's data, made or loaded
    policy = sft_policy("tictactoe", preset)          # chapter 4's checkpoint, trained or loaded
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from .cache import cache_root, folder_lock
from .expert_data import (
    SelfPlayConfig,
    augment_with_symmetries,
    counterfactual_recipes,
    expert_examples,
    load_examples,
    mcts_selfplay,
    save_examples,
    tictactoe_examples,
)
from .models import is_pretrained
from .presets import Preset
from .tiny_model import RECIPE_VERSION, TinyConfig

#: bump when expert data or SFT recipes change, so stale cache entries are not reused
PIPELINE_VERSION = 1

#: the preset field (``GameSettings``) holding each RL algorithm's settings
RL_ALGORITHMS = {"rl": "reinforce", "ppo": "ppo"}


def _key(*parts: Any) -> str:
    blob = json.dumps([PIPELINE_VERSION, RECIPE_VERSION, *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def selfplay_configs(preset: Preset) -> list[SelfPlayConfig]:
    """Tic-tac-toe's MCTS data at ``preset``: self-play, then (if any) games against a random player."""
    selfplay = SelfPlayConfig(**{**preset.selfplay, "episodes": preset.game("tictactoe").expert_episodes})
    configs = [selfplay]
    if preset.mcts_vs_random_games:
        # positions a weak opponent leads to, which self-play rarely visits (chapter 3)
        configs.append(replace(selfplay, opponent="random", episodes=preset.mcts_vs_random_games, epsilon=0.0,
                               seed=selfplay.seed + 1))
    return configs


def make_expert_data(game: str, preset: Preset, *, progress: bool = False) -> list[dict[str, Any]]:
    """Expert examples for ``game`` at ``preset``'s scale (CookingWorld: train fold only)."""
    settings = preset.game(game)
    if game == "tictactoe":
        records = [r for config in selfplay_configs(preset) for r in mcts_selfplay(config, progress=progress)]
        # every position under the 8 symmetries of the board (chapter 3)
        return tictactoe_examples(augment_with_symmetries(records), worked_lines=settings.worked_lines)
    options = dict(settings.env_options)
    if game == "cookingworld":
        options["fold"] = "train"  # never learn from test games
    examples = expert_examples(game, range(settings.expert_episodes), env_options=options,
                               mistake_rate=settings.expert_mistake_rate, progress=progress)
    if settings.counterfactual_recipes:
        # recipes the train fold lacks (chapter 3)
        examples = counterfactual_recipes(examples, step_copies=settings.recipe_step_copies)
    return examples


def expert_data_path(game: str, preset: Preset) -> Path:
    settings = preset.game(game)
    tictactoe = (preset.selfplay, preset.mcts_vs_random_games) if game == "tictactoe" else None
    # only what makes the data: training and evaluation settings must not invalidate it (the small
    # preset shares ci's expert data)
    key = _key(game, {k: v for k, v in asdict(settings).items() if k not in (*RL_ALGORITHMS, "grpo", "sft", "eval_episodes")},
               tictactoe)
    return cache_root() / "expert_data" / f"{game}-{key}.jsonl"


def expert_data(game: str, preset: Preset, *, progress: bool = False) -> list[dict[str, Any]]:
    """Chapter 3's expert examples for ``game``, from the cache or made now (and cached)."""
    path = expert_data_path(game, preset)
    if not path.exists():
        save_examples(make_expert_data(game, preset, progress=progress), path)
    return load_examples(path).to_list()


def sft_settings(game: str, preset: Preset):
    from .sft import SFTSettings

    base = SFTSettings() if not is_pretrained(preset.model) else SFTSettings.for_pretrained()
    return SFTSettings(**{**asdict(base), **preset.sft, **preset.game(game).sft})


def lora_for(preset: Preset):
    """What ``load_policy(preset.model, lora=...)`` gets: LoRA for a pretrained model, none for tiny."""
    return (preset.lora or True) if is_pretrained(preset.model) else None


def sft_dir(game: str, preset: Preset) -> Path:
    key = _key(game, str(expert_data_path(game, preset).name), asdict(sft_settings(game, preset)), preset.model,
               asdict(TinyConfig()) if preset.model == "tiny" else None, preset.lora if is_pretrained(preset.model) else None)
    return cache_root() / "sft" / f"{game}-{key}"


def rl_settings(game: str, preset: Preset, algo: str = "reinforce"):
    """RL settings for ``game``: chapter 5's REINFORCE (``algo="rl"`` in the preset) or chapter 6's
    PPO (``ppo``); the preset's overrides, the game's options merged in."""
    if algo not in RL_ALGORITHMS.values():
        raise ValueError(f"unknown RL algorithm {algo!r}; use one of {', '.join(RL_ALGORITHMS.values())}")
    if algo == "ppo":
        from .ppo import PPOSettings as settings_class
    else:
        from .reinforce import ReinforceSettings as settings_class
    field_name = next(name for name, value in RL_ALGORITHMS.items() if value == algo)
    overrides = dict(getattr(preset.game(game), field_name))
    env_options = {**preset.game(game).env_options, **overrides.pop("env_options", {})}
    return settings_class(**{**overrides, "env_options": env_options})


def evaluate_policy(game: str, policy, *, preset: Preset, episodes: int | None = None,
                    env_options: dict | None = None, **options) -> dict[str, float]:
    """Greedy play on evaluation seeds 0..episodes-1 (training uses seeds from 100,000 up) with the
    preset's options for ``game`` and ``env_options`` and ``options`` on top (an opponent, a fold):
    the summary chapters 4-7 and the seed benchmarks compare before and after training.
    ``env_options`` takes a dict such as an RL run's (GuessTheNumber's option ``preset`` cannot be
    a keyword here). ``episodes`` defaults to the preset's ``eval_episodes``."""
    from .episodes import run_episodes
    from .evaluate import summarize

    settings = preset.game(game)
    records = run_episodes(game, policy, range(settings.eval_episodes if episodes is None else episodes),
                           env_options={**settings.env_options, **(env_options or {}), **options}, batch_size=100)
    return summarize(records)


def grpo_settings(game: str, preset: Preset):
    """Chapter 7's GRPO settings for ``game`` (math, or tic-tac-toe's single moves): the preset's
    overrides, with room for the game's longest answer unless the preset says otherwise."""
    from .grpo import GRPOSettings
    from .policies import MAX_NEW_TOKENS

    return GRPOSettings(**{"max_completion_length": MAX_NEW_TOKENS[game], **preset.game(game).grpo})


def sft_policy(game: str, preset: Preset, *, data_seed: int | None = None, progress: bool = False,
               **policy_options):
    """Chapter 4's fine-tuned policy for ``game``, from the cache or trained now (and cached).

    ``data_seed`` trains the same recipe with another order of the examples (the multi-seed studies
    of ``benchmarks/``); ``None`` or the preset's own seed is chapter 4's checkpoint.
    """
    from .models import load_policy
    from .sft import train_sft

    settings = sft_settings(game, preset)
    folder = sft_dir(game, preset)
    if data_seed is not None and data_seed != settings.seed:
        settings = replace(settings, seed=data_seed)
        folder = folder.with_name(f"{folder.name}-data-seed-{data_seed}")
    # under the folder's lock: a chapter running beside chapter 4 (make book) waits for its training
    # to finish, or trains the checkpoint itself, instead of loading half of one
    with folder_lock(folder):
        if not (folder / "sft_result.json").exists():
            policy = load_policy(preset.model, lora=lora_for(preset))
            # the trainer's live table and log lines only when asked for (a notebook would fill with them)
            train_sft(policy, expert_data(game, preset, progress=progress), replace(settings, progress=progress),
                      output_dir=folder)
        return load_policy(str(folder), **policy_options)
