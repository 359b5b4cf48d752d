"""Chapter-to-chapter results, cached by configuration (chapters 3-4 and later).

Colab opens one chapter at a time, so a chapter that needs an earlier chapter's result (the expert
data of chapter 3, the SFT checkpoint of chapter 4) gets it from here: looked up in the cache
under a key made from every setting that produced it, and recomputed when the cache has none.

    examples = expert_data("tictactoe", preset)       # chapter 3's data, made or loaded
    policy = sft_policy("tictactoe", preset)          # chapter 4's checkpoint, trained or loaded

Also the SFT settings a preset gives a game (:func:`sft_settings`, the key of its checkpoint); the
RL settings are resolved beside the presets (:func:`tutorial_lib.presets.rl_settings`).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from tutorial_lib.data.expert_data import (
    SelfPlayConfig,
    augment_with_symmetries,
    counterfactual_recipes,
    expert_examples,
    load_examples,
    mcts_selfplay,
    save_examples,
    tictactoe_examples,
)
from tutorial_lib.data.sft import SFTSettings, staged_run_writer, train_sft
from tutorial_lib.lm.models import is_pretrained, load_policy
from tutorial_lib.lm.tiny_model import RECIPE_VERSION, TinyConfig
from tutorial_lib.presets import Preset
from tutorial_lib.runtime import durable
from tutorial_lib.runtime.cache import cache_root, folder_lock

#: bump when expert data or SFT recipes change, so stale cache entries are not reused
PIPELINE_VERSION = 1

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


def selfplay_records(config: SelfPlayConfig, *, progress: bool = False) -> list[dict[str, Any]]:
    """The records of :func:`~tutorial_lib.data.expert_data.mcts_selfplay` for ``config``, from the
    cache or played now and cached. Chapter 3 shows the games chapter 4 trains on, and a build runs
    both: the games are played once (seeded, so either chapter would play the same ones). Each
    record keeps the seconds its move took when it was played."""
    path = cache_root() / "selfplay" / f"{_key(asdict(config))}.jsonl"
    if path.exists():
        return [json.loads(line) for line in path.read_text().splitlines()]
    records = mcts_selfplay(config, progress=progress)
    durable.write_text(path, "".join(json.dumps(record) + "\n" for record in records))  # whole, or not at all
    return records


def make_expert_data(game: str, preset: Preset, *, progress: bool = False) -> list[dict[str, Any]]:
    """Expert examples for ``game`` at ``preset``'s scale (CookingWorld: train fold only)."""
    settings = preset.game(game)
    if game == "tictactoe":
        records = [r for config in selfplay_configs(preset) for r in selfplay_records(config, progress=progress)]
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
    key = _key(game, {k: v for k, v in asdict(settings).items() if k not in ("reinforce", "ppo", "grpo", "sft", "eval_episodes")},
               tictactoe)
    return cache_root() / "expert_data" / f"{game}-{key}.jsonl"


def expert_data(game: str, preset: Preset, *, progress: bool = False) -> list[dict[str, Any]]:
    """Chapter 3's expert examples for ``game``, from the cache or made now (and cached)."""
    path = expert_data_path(game, preset)
    if not path.exists():
        save_examples(make_expert_data(game, preset, progress=progress), path)
    return load_examples(path).to_list()


def sft_settings(game: str, preset: Preset):

    base = SFTSettings() if not is_pretrained(preset.model) else SFTSettings.for_pretrained()
    return SFTSettings(**{**asdict(base), **preset.sft, **preset.game(game).sft})


def with_sft_changes(preset: Preset, game: str, **changes: Any) -> Preset:
    """``preset`` with ``game``'s SFT recipe changed (``epochs=30``): the benchmarks' studies of the
    recipe. Its checkpoints get folders of their own (:func:`sft_dir` is named by the settings);
    an unknown field is a ``ValueError`` (``GameSettings`` checks its overrides)."""
    settings = preset.game(game)
    return replace(preset, games={**preset.games, game: replace(settings, sft={**settings.sft, **changes})})


def lora_for(preset: Preset):
    """What ``load_policy(preset.model, lora=...)`` gets: LoRA for a pretrained model, none for tiny."""
    return (preset.lora or True) if is_pretrained(preset.model) else None


def sft_dir(game: str, preset: Preset) -> Path:
    key = _key(game, str(expert_data_path(game, preset).name), asdict(sft_settings(game, preset)), preset.model,
               asdict(TinyConfig()) if preset.model == "tiny" else None,
               # adapters drawn from the SFT seed (``load_policy``'s lora_seed): checkpoints made before it are not reused
               {"lora": preset.lora, "init": "seeded"} if is_pretrained(preset.model) else None)
    return cache_root() / "sft" / f"{game}-{key}"


def sft_policy(game: str, preset: Preset, *, data_seed: int | None = None, progress: bool = False,
               **policy_options):
    """Chapter 4's fine-tuned policy for ``game``, from the cache or trained now (and cached).

    ``data_seed`` trains the same recipe with another order of the examples, and for a pretrained
    model other initial LoRA adapters (the multi-seed studies of ``benchmarks/``); ``None`` or the
    preset's own seed is chapter 4's checkpoint.
    """

    settings = sft_settings(game, preset)
    folder = sft_dir(game, preset)
    if data_seed is not None and data_seed != settings.seed:
        settings = replace(settings, seed=data_seed)
        folder = folder.with_name(f"{folder.name}-data-seed-{data_seed}")
    while True:
        # a chapter running beside chapter 4 (make book, or two notebooks open) waits while chapter 4
        # trains this checkpoint in stages (no lock is held between its cells) ...
        wait_for_staged_run(folder)
        # ... and under the folder's lock for a run in one piece, instead of loading half of one
        with folder_lock(folder):
            if not durable.recover(folder):  # none, or one whose training was killed: (re)trained whole
                if _trained_elsewhere(folder):  # a staged run began since the wait: wait for it
                    continue
                # a seed is a whole start: the adapters' initial values as well as the examples' order
                policy = load_policy(preset.model, lora=lora_for(preset), lora_seed=settings.seed)
                # the trainer's live table and log lines only when asked for (a notebook would fill with them)
                train_sft(policy, expert_data(game, preset, progress=progress), replace(settings, progress=progress),
                          output_dir=folder)
            return load_policy(str(folder), **policy_options)


def _trained_elsewhere(folder: Path) -> dict | None:
    """The live process, other than this one, that is training ``folder`` in stages (or ``None``)."""
    writer = staged_run_writer(folder)
    mine = writer is not None and writer["pid"] == os.getpid() and writer["host"] == socket.gethostname()
    return None if mine else writer


def wait_for_staged_run(folder: str | Path, poll_seconds: float = 10.0, log=print) -> None:
    """Return once no other live process is training ``folder`` in stages (``train_sft(stage=...)``
    over a notebook's cells: chapter 4's tic-tac-toe and CookingWorld). Says once whom it waits for.
    A run in this process is not waited for (that would never end); a killed one is not either."""
    said = False
    while (writer := _trained_elsewhere(Path(folder))) is not None:
        if not said:
            log(f"waiting for process {writer['pid']}, which is training {Path(folder).name} in stages "
                f"({writer['parts_done']} of {writer['parts']} parts done): it is about to finish the "
                "checkpoint this loads (stop that process to have this one train it instead)")
            said = True
        time.sleep(poll_seconds)
