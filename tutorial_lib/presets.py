"""The four scales every chapter runs at, chosen by ``TUTORIAL_SCALE`` (all chapters).

* ``ci``    -- the tiny offline model on a CPU, small counts: every chapter runs in minutes on a
  2-core laptop and in CI, with no network.
* ``small`` -- a real pretrained model on a CPU, with no network: SmolLM2-135M-Instruct (installed
  from PyPI, :data:`tutorial_lib.lm.models.OFFLINE_MODELS`), LoRA, counts sized for a 2-core machine
  (tens of minutes per chapter rather than minutes; chapter 9 runs a slice of it in CI).
* ``gpu``   -- the ``small`` preset's model (SmolLM2-135M-Instruct, offline) on one GPU, counts sized
  for a chapter in about ten minutes on a T4-class card: what a reader who opens a chapter on a GPU
  (a Colab runtime) gets.
* ``full``  -- a real pretrained model from the Hugging Face Hub (Qwen2.5-0.5B-Instruct by default),
  LoRA or 4-bit QLoRA, seed-sized counts, on a GPU or TPU: hours per chapter, asked for by name.

When ``TUTORIAL_SCALE`` is unset the preset is ``gpu`` if an accelerator is present, else ``ci``.
``TUTORIAL_MODEL`` overrides the preset's model (a hub id, an offline model's name, or ``tiny``).
Training settings follow the model as well as the scale: ``ci`` was tuned for the tiny model trained
from scratch (full fine-tuning, lr 3e-3, dozens of epochs), which would wreck a pretrained model, so
naming a pretrained model at ``ci`` takes the ``small`` preset's settings (LoRA, lr 3e-4, a few
dozen steps), and naming ``tiny`` at ``small`` or ``full`` takes ``ci``'s (:func:`get_preset`).

Holds :data:`PRESETS` (each written out whole), :data:`PRETRAINED_AT_CI` (``small`` with chapter 9's
CI counts), and :func:`rl_settings`, the one resolver of a run's RL settings from a preset (with
:func:`grpo_settings`). Imports ``data``'s and ``rl``'s settings classes, ``lm`` and ``runtime``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from tutorial_lib.data.sft import SFTSettings
from tutorial_lib.lm.models import DEFAULT_LORA, is_pretrained
from tutorial_lib.lm.policies import MAX_NEW_TOKENS
from tutorial_lib.rl.grpo import GRPOSettings
from tutorial_lib.rl.ppo import PPOSettings
from tutorial_lib.rl.reinforce import ReinforceSettings
from tutorial_lib.runtime.cpu_threads import describe_threads
from tutorial_lib.runtime.device import device_kind, has_accelerator

SCALES = ("ci", "small", "gpu", "full")
DEFAULT_HUB_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
DEFAULT_OFFLINE_MODEL = "smollm2-135m"


#: tic-tac-toe's rules during RL (chapters 5 and 6, every preset). An illegal move forfeits the game:
#: with the default fallback (a random legal move played for it) it costs nothing, and RL would not
#: stop writing them. Each game is against random or minimax, half and half: against random alone the
#: draws against minimax moved either way from one start to the next, against minimax alone the
#: policy drifted in the positions random play reaches; the mixture raised the minimax draws in every
#: recorded start (benchmarks/results/rl_numerics_grid.md, the three tic-tac-toe opponent tables).
TICTACTOE_RL_OPTIONS = {"invalid_move": "forfeit", "opponent": "mixed"}


@dataclass(frozen=True, kw_only=True)
class GameSettings:
    """How one game is played, imitated and evaluated at one scale (chapters 3-4)."""

    #: options for ``envs.make`` (the world, the opponent...)
    env_options: dict = field(default_factory=dict)
    #: expert episodes (self-play games for tic-tac-toe) turned into SFT examples
    expert_episodes: int = 100
    #: overrides of :class:`tutorial_lib.data.sft.SFTSettings` (on top of ``SFTSettings.for_pretrained()``
    #: when the preset's model is pretrained, and of the preset's own ``sft``): overrides rather than a
    #: settings object because three layers meet (the model's kind, the scale, the game); each key
    #: is checked against ``SFTSettings``'s fields when the preset is built
    sft: dict = field(default_factory=dict)
    #: episodes per evaluation
    eval_episodes: int = 200
    #: chapter 5's REINFORCE; its ``env_options`` go on top of the game's (``None``: the defaults)
    reinforce: ReinforceSettings | None = None
    #: chapter 6's PPO; its ``env_options`` go on top of the game's (``None``: the defaults)
    ppo: PPOSettings | None = None
    #: chapter 7's GRPO (math, and tic-tac-toe's single moves; ``None``: the defaults, with room
    #: for the game's longest answer)
    grpo: GRPOSettings | None = None
    #: probability of an injected invalid command before each expert action (recovery data,
    #: :class:`tutorial_lib.data.expert_data.ExpertWithMistakes`; CookingWorld)
    expert_mistake_rate: float = 0.0
    #: rewrite each expert episode under a random permutation of the ways to cut and to cook
    #: (:func:`tutorial_lib.data.expert_data.counterfactual_recipes`; CookingWorld)
    counterfactual_recipes: bool = False
    #: with ``counterfactual_recipes``: further rewritten copies of each cut and cook step
    recipe_step_copies: int = 0
    #: tic-tac-toe: completions write out the board's 8 lines, and the square that completes each,
    #: before the move (:func:`tutorial_lib.envs.tictactoe.worked_lines`; chapter 4)
    worked_lines: bool = False

    def __post_init__(self) -> None:
        check_sft_overrides(self.sft)


def check_sft_overrides(overrides: dict) -> None:
    """A preset's SFT overrides name :class:`~tutorial_lib.data.sft.SFTSettings` fields, or the
    preset is an error where it is written, not when a chapter trains."""
    unknown = sorted(set(overrides) - {f.name for f in fields(SFTSettings)})
    if unknown:
        raise ValueError(f"SFTSettings has no field {', '.join(unknown)}")


@dataclass(frozen=True)
class Preset:
    """Settings that change with scale. Everything not here is the same at every scale."""

    name: str
    #: ``"tiny"`` (built offline), an offline pretrained model's name or a Hugging Face Hub id
    model: str
    #: episodes per game for the baselines of chapter 1
    baseline_episodes: int
    #: MCTS simulations per move when MCTS is the opponent in evaluation
    mcts_simulations: int
    #: games evaluated against the MCTS opponent (it is slow: ~1000 simulations per move)
    mcts_games: int
    #: math problems come from the offline generator (``generated``) or GSM8K (``gsm8k``)
    math_source: str
    #: the CookingWorld world (TextWorldExpress game parameters)
    cookingworld: dict = field(default_factory=dict)
    #: per-game data, training and evaluation settings
    games: dict = field(default_factory=dict)
    #: MCTS self-play settings for tic-tac-toe expert data (``SelfPlayConfig`` fields)
    selfplay: dict = field(default_factory=dict)
    #: further games of MCTS against a random player, added to the self-play data (chapter 3)
    mcts_vs_random_games: int = 0
    #: LoRA settings (``peft.LoraConfig`` fields) for a pretrained model; ``None``: full fine-tuning.
    #: The pretrained presets take :data:`tutorial_lib.lm.models.DEFAULT_LORA`
    lora: dict | None = None
    #: SFT settings shared by every game of the preset (each game's ``sft`` goes on top)
    sft: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_sft_overrides(self.sft)

    def game(self, name: str) -> GameSettings:
        if name not in self.games:
            raise ValueError(f"preset {self.name!r} has no settings for {name!r}; it has {', '.join(self.games)}")
        return self.games[name]


#: every preset, written out whole: nothing below patches one
PRESETS: dict[str, Preset] = {
    "ci": Preset(
        name="ci",
        model="tiny",
        baseline_episodes=200,
        mcts_simulations=1000,
        mcts_games=50,
        math_source="generated",
        cookingworld=dict(num_locations=3, include_doors=1, num_distractor_items=2, num_ingredients=2),
        games={
            # Constant lr and Adam beta2 0.95 (a decaying lr stopped before legal moves were learnt);
            # worked lines before the move, 45 epochs. Why each setting, with the runs behind it:
            # benchmarks/results/sft_recipe.md and reinforce_tictactoe*.md (chapters 4 and 5).
            "tictactoe": GameSettings(
                env_options=dict(opponent="random", agent_mark="alternate"),
                expert_episodes=300,
                sft=dict(epochs=45, learning_rate=3e-3, lr_scheduler="constant", extra={"adam_beta2": 0.95}),
                # chapter 5: 120 batches with the rate falling over the last 30, so that a run ends
                # well above its start rather than wherever a constant rate left it (rl_numerics_grid.md,
                # the 120-iteration sections); half the rate it was tuned at (1e-3), the guard that held
                # its verdict cells, fixed in advance (heldout_protocol.md, tictactoe_rl_verdict.md)
                reinforce=ReinforceSettings(iterations=120, learning_rate=5e-4, lr_schedule="warmup_stable_decay",
                                            decay_iterations=30, env_options=dict(TICTACTOE_RL_OPTIONS)),
                # chapter 6: the same start, opponents, batch size and batches as chapter 5's REINFORCE;
                # two epochs of two minibatches take four steps per batch, so a lower, constant rate
                # (at 1e-3 runs collapsed under another rounding: rl_numerics_grid.md)
                ppo=PPOSettings(iterations=120, learning_rate=3e-4, lr_schedule="constant", gamma=1.0, gae_lambda=0.95,
                         minibatch_turns=128, microbatch_turns=128, env_options=dict(TICTACTOE_RL_OPTIONS)),
                # chapter 7: single moves of decisive positions, the minimax reward; fewer sampled tokens
                # than chapter 6's PPO run (benchmarks/results/grpo_tictactoe.md)
                grpo=GRPOSettings(steps=40, prompts_per_step=16, num_generations=8, learning_rate=3e-4,
                                max_completion_length=MAX_NEW_TOKENS["tictactoe"]),
                worked_lines=True,
            ),
            # The smallest world the book allows for learning at ci: 2 rooms, 1 ingredient, 1 distractor.
            # 500 gold-path games with recovery data (an invalid command before 15% of the gold
            # actions) and counterfactual recipes (permuted cut and cook verbs, cut and cook steps
            # copied twice more), 8 epochs, random batches of 16 in 4 length-grouped micro-batches.
            # Each choice and its measured effect, over data-order seeds where the spread matters:
            # benchmarks/results/sft_recipe.md (chapter 4).
            "cookingworld": GameSettings(
                env_options=dict(num_locations=2, include_doors=1, num_distractor_items=1, num_ingredients=1),
                expert_episodes=500,
                sft=dict(epochs=8, learning_rate=3e-3, batch_size=16, micro_batches=4, lr_scheduler="constant",
                         extra={"adam_beta2": 0.95}),
                eval_episodes=100,
                # PPO trains on the train fold only; a CookingWorld update costs ~10x a math one
                # (prompts of ~300 tokens, episodes of ~15 turns), so few, small iterations at ci,
                # and the KL to the SFT policy keeps the noisy updates near it (chapter 6)
                ppo=PPOSettings(iterations=8, turns_per_iteration=128, num_envs=16, learning_rate=3e-4, gamma=0.99,
                         gae_lambda=0.95, kl_coef=0.1, minibatch_turns=64, microbatch_turns=32, save_every=2,
                         env_options={"fold": "train"}),
                expert_mistake_rate=0.15,
                counterfactual_recipes=True,
                recipe_step_copies=2,
            ),
            # 1,000 binary-search games: 2,901 examples, 10 distinct (binary search on 1-10 visits 10
            # states), so each step trains the 10 weighted by their counts, 300 steps: the same success as
            # 10 epochs of the 2,901 (1,820 steps) for a tenth of the time (benchmarks/results/sft_recipe.md)
            "guess_the_number": GameSettings(
                env_options=dict(preset="easy"),
                expert_episodes=1000,
                sft=dict(epochs=300, merge_duplicates=True, learning_rate=3e-3, lr_scheduler="constant",
                         extra={"adam_beta2": 0.95}),
                # the SFT policy already plays binary search and samples it with probability ~1, so
                # REINFORCE has nothing to compare (chapter 5): 15 iterations show it as well as 30
                reinforce=ReinforceSettings(iterations=15, learning_rate=1e-3),
            ),
            # PPO: the training split is chapter 4's 600 problems (seeds 0-599); sampling at T=0.5
            # (scored at 0.5) puts ~3x more right answers in a batch than T=1 (chapter 6)
            "math": GameSettings(
                env_options=dict(source="generated", level=1),
                expert_episodes=600,
                sft=dict(epochs=25, learning_rate=3e-3),
                ppo=PPOSettings(iterations=36, turns_per_iteration=256, num_envs=64, learning_rate=3e-4, temperature=0.5,
                         first_seed=0, train_seeds=600, gamma=1.0, gae_lambda=1.0, minibatch_turns=64,
                         microbatch_turns=64),
                # chapter 7: GRPO on the same split, temperature and token budget
                grpo=GRPOSettings(steps=300, prompts_per_step=8, num_generations=8, learning_rate=3e-4, temperature=0.5,
                          token_budget=150_000),
            ),
        },
        selfplay=dict(episodes=300, simulations=1000, epsilon=0.1),
        mcts_vs_random_games=300,
    ),
    # A pretrained model on a CPU: SmolLM2-135M-Instruct with LoRA. One step of 8 GuessTheNumber
    # examples (~150 tokens) takes ~6 s on 2 cores, ~200x the tiny model's, so counts are in steps,
    # not epochs. The expert data is ci's (same games, same MCTS), so its cache is shared.
    "small": Preset(
        name="small",
        model=DEFAULT_OFFLINE_MODEL,
        baseline_episodes=200,
        mcts_simulations=1000,
        mcts_games=20,
        math_source="generated",
        cookingworld=dict(num_locations=3, include_doors=1, num_distractor_items=2, num_ingredients=2),
        games={
            "tictactoe": GameSettings(
                env_options=dict(opponent="random", agent_mark="alternate"),
                expert_episodes=300,
                sft=dict(max_steps=80, logging_steps=5),
                eval_episodes=50,
                reinforce=ReinforceSettings(iterations=10, turns_per_iteration=64, num_envs=16, microbatch_turns=8,
                        learning_rate=5e-5, env_options=dict(TICTACTOE_RL_OPTIONS)),
                ppo=PPOSettings(iterations=5, turns_per_iteration=64, num_envs=16, minibatch_turns=32, microbatch_turns=8,
                         learning_rate=5e-5, gamma=1.0, env_options=dict(TICTACTOE_RL_OPTIONS)),
                # chapter 7's single moves: GRPO's defaults (40 steps of 4 positions x 16 answers) would be
                # ~2,500 sampled and trained answers of SmolLM2, hours on 2 cores; the math run's scale
                grpo=GRPOSettings(steps=8, prompts_per_step=4, num_generations=4, learning_rate=5e-5,
                                max_completion_length=MAX_NEW_TOKENS["tictactoe"]),
            ),
            "cookingworld": GameSettings(
                env_options=dict(num_locations=2, include_doors=1, num_distractor_items=1, num_ingredients=1),
                expert_episodes=100,
                sft=dict(max_steps=60, logging_steps=5),
                eval_episodes=20,
                ppo=PPOSettings(iterations=3, turns_per_iteration=32, num_envs=8, learning_rate=5e-5, gamma=0.99,
                         gae_lambda=0.95, kl_coef=0.1, minibatch_turns=16, microbatch_turns=4, save_every=1,
                         env_options={"fold": "train"}),
                expert_mistake_rate=0.15,
            ),
            # 40 steps of 8 examples: the loss is ~.01 by step 25 (benchmarks/results/smollm2_cpu.md)
            "guess_the_number": GameSettings(
                env_options=dict(preset="easy"),
                expert_episodes=300,
                sft=dict(max_steps=40, logging_steps=5),
                eval_episodes=100,
                reinforce=ReinforceSettings(iterations=4, turns_per_iteration=32, num_envs=16, microbatch_turns=8, learning_rate=5e-5,
                        env_options={"preset": "hard"}),
            ),
            "math": GameSettings(
                env_options=dict(source="generated", level=1),
                expert_episodes=600,
                sft=dict(max_steps=40, logging_steps=5),
                eval_episodes=50,
                ppo=PPOSettings(iterations=4, turns_per_iteration=32, num_envs=32, learning_rate=5e-5, temperature=0.5,
                         first_seed=0, train_seeds=600, gamma=1.0, gae_lambda=1.0, minibatch_turns=16,
                         microbatch_turns=8),
                grpo=GRPOSettings(steps=8, prompts_per_step=4, num_generations=4, learning_rate=5e-5, temperature=0.5),
            ),
        },
        selfplay=dict(episodes=300, simulations=1000, epsilon=0.1),
        mcts_vs_random_games=300,
        lora=DEFAULT_LORA,
        # one example per micro-batch row, no accumulation: a CPU step is already seconds; no
        # activation checkpointing (it saves memory a CPU has, at ~30% more time); constant lr
        sft=dict(batch_size=8, gradient_accumulation_steps=1, gradient_checkpointing=False, learning_rate=3e-4,
                 lr_scheduler="constant", warmup_ratio=0.0),
    ),
    # ``small``'s model, recipes and learning rates with counts for one GPU, every update sized to
    # the card's free memory (size_to_device). The counts are estimates, not yet timed on a T4-class
    # card: from the H200 record (benchmarks/results/gpu_full_path.md: a REINFORCE iteration of 256
    # turns with 32 games side by side took ~14 s, mostly sampling), on the reasoning that a small
    # model's sampling is bound by kernel launches, so more games side by side cost little more time.
    "gpu": Preset(
        name="gpu",
        model=DEFAULT_OFFLINE_MODEL,
        baseline_episodes=200,
        mcts_simulations=1000,
        mcts_games=50,
        math_source="generated",
        cookingworld=dict(num_locations=3, include_doors=1, num_distractor_items=2, num_ingredients=2),
        games={
            "tictactoe": GameSettings(
                env_options=dict(opponent="random", agent_mark="alternate"),
                expert_episodes=300,
                sft=dict(max_steps=120, logging_steps=10),
                eval_episodes=200,
                reinforce=ReinforceSettings(iterations=30, turns_per_iteration=128, num_envs=64, microbatch_turns=8,
                        learning_rate=5e-5, size_to_device=True, env_options=dict(TICTACTOE_RL_OPTIONS)),
                ppo=PPOSettings(iterations=15, turns_per_iteration=128, num_envs=64, minibatch_turns=64, microbatch_turns=8,
                         learning_rate=5e-5, gamma=1.0, size_to_device=True, env_options=dict(TICTACTOE_RL_OPTIONS)),
                grpo=GRPOSettings(steps=8, prompts_per_step=4, num_generations=4, learning_rate=5e-5,
                                max_completion_length=MAX_NEW_TOKENS["tictactoe"]),
            ),
            "cookingworld": GameSettings(
                env_options=dict(num_locations=2, include_doors=1, num_distractor_items=1, num_ingredients=1),
                expert_episodes=100,
                sft=dict(max_steps=60, logging_steps=5),
                eval_episodes=50,
                ppo=PPOSettings(iterations=6, turns_per_iteration=64, num_envs=16, learning_rate=5e-5, gamma=0.99,
                         gae_lambda=0.95, kl_coef=0.1, minibatch_turns=16, microbatch_turns=4, save_every=1,
                         size_to_device=True, env_options={"fold": "train"}),
                expert_mistake_rate=0.15,
            ),
            "guess_the_number": GameSettings(
                env_options=dict(preset="easy"),
                expert_episodes=300,
                sft=dict(max_steps=40, logging_steps=5),
                eval_episodes=200,
                reinforce=ReinforceSettings(iterations=20, turns_per_iteration=128, num_envs=64, microbatch_turns=8,
                        learning_rate=5e-5, size_to_device=True, env_options={"preset": "hard"}),
            ),
            "math": GameSettings(
                env_options=dict(source="generated", level=1),
                expert_episodes=600,
                sft=dict(max_steps=80, logging_steps=10),
                eval_episodes=200,
                ppo=PPOSettings(iterations=12, turns_per_iteration=64, num_envs=64, learning_rate=5e-5, temperature=0.5,
                         first_seed=0, train_seeds=600, gamma=1.0, gae_lambda=1.0, minibatch_turns=32,
                         microbatch_turns=8, size_to_device=True),
                grpo=GRPOSettings(steps=8, prompts_per_step=4, num_generations=4, learning_rate=5e-5, temperature=0.5),
            ),
        },
        selfplay=dict(episodes=300, simulations=1000, epsilon=0.1),
        mcts_vs_random_games=300,
        lora=DEFAULT_LORA,
        sft=dict(batch_size=16, gradient_accumulation_steps=1, gradient_checkpointing=False, learning_rate=3e-4,
                 lr_scheduler="constant", warmup_ratio=0.0, size_to_device=True),
    ),
    "full": Preset(
        name="full",
        model=DEFAULT_HUB_MODEL,
        baseline_episodes=1000,
        mcts_simulations=1000,
        mcts_games=100,
        math_source="gsm8k",
        cookingworld=dict(num_locations=3, include_doors=1, num_distractor_items=2, num_ingredients=2),
        games={
            "tictactoe": GameSettings(
                env_options=dict(opponent="random", agent_mark="alternate"), expert_episodes=1000, sft=dict(epochs=1),
                reinforce=ReinforceSettings(iterations=100, learning_rate=4e-5, size_to_device=True,
                                            env_options=dict(TICTACTOE_RL_OPTIONS)),
                ppo=PPOSettings(iterations=50, learning_rate=4e-5, critic_learning_rate=1e-4, gamma=1.0, size_to_device=True,
                         env_options=dict(TICTACTOE_RL_OPTIONS)),
            ),
            "cookingworld": GameSettings(
                env_options=dict(num_locations=3, include_doors=1, num_distractor_items=2, num_ingredients=2),
                expert_episodes=900, sft=dict(epochs=1), eval_episodes=200,
                # the TextWorld tutorial's PPO: GAE lambda 0.95, KL to the SFT policy 0.2
                ppo=PPOSettings(iterations=50, learning_rate=1e-5, critic_learning_rate=1e-4, gamma=0.99, gae_lambda=0.95,
                         kl_coef=0.2, microbatch_turns=8, size_to_device=True, env_options={"fold": "train"}),
            ),
            "guess_the_number": GameSettings(env_options=dict(preset="hard"), expert_episodes=1000, sft=dict(epochs=1),
                                             reinforce=ReinforceSettings(iterations=100, learning_rate=4e-5,
                                                                         size_to_device=True)),
            # the GSM8K PPO tutorial: rollout batch 16, minibatch 8, 2 epochs, clip 0.2 / value clip 0.5,
            # actor lr 1e-6, critic lr 1e-5, separate critic, no reference; GSM8K's train split
            "math": GameSettings(env_options=dict(source="gsm8k"), expert_episodes=7473, sft=dict(epochs=1),
                                 ppo=PPOSettings(iterations=400, turns_per_iteration=16, num_envs=16, minibatch_turns=8,
                                          microbatch_turns=8, learning_rate=1e-6, critic_learning_rate=1e-5,
                                          critic="separate", gamma=1.0, gae_lambda=1.0, temperature=0.9,
                                          first_seed=0, train_seeds=7473, warmup_iterations=10, size_to_device=True),
                                 grpo=GRPOSettings(steps=500, prompts_per_step=8, num_generations=8, learning_rate=1e-6,
                                           temperature=0.9, env_options={"source": "gsm8k"})),
        },
        selfplay=dict(episodes=1000, simulations=1000, epsilon=0.1),
        mcts_vs_random_games=1000,
        lora=DEFAULT_LORA,
        # the micro-batch, accumulation and checkpointing follow the model and the card's free memory;
        # the examples of an optimiser step stay SFTSettings.for_pretrained's 64
        sft=dict(size_to_device=True),
    ),
}

def _with_games(preset: Preset, name: str, **games: dict) -> Preset:
    """``preset`` named ``name``, with the fields of each game in ``games`` changed (a game's
    ``reinforce``/``ppo`` changes as a dict of that settings' fields)."""
    changed = {}
    for game, changes in games.items():
        settings = preset.game(game)
        changes = {key: replace(getattr(settings, key), **value) if key in ("reinforce", "ppo", "grpo") else value
                   for key, value in changes.items()}
        changed[game] = replace(settings, **changes)
    return replace(preset, name=name, games={**preset.games, **changed})


#: what chapter 9 runs a pretrained model at under plain ``ci``: ``small``'s model and recipes with
#: its counts cut to a CI chapter's budget (about six minutes on 2 cores): fewer evaluation games,
#: fewer SFT steps and one short REINFORCE iteration on GuessTheNumber (at ci the chapter measures what an
#: iteration costs; it cannot afford learning)
PRETRAINED_AT_CI = _with_games(
    PRESETS["small"], "ci",
    tictactoe=dict(eval_episodes=12),
    cookingworld=dict(eval_episodes=4),
    guess_the_number=dict(eval_episodes=50, sft=dict(max_steps=16, logging_steps=5),
                          reinforce=dict(iterations=1, turns_per_iteration=16, num_envs=8)),
    math=dict(eval_episodes=30),
)


def scale_name() -> str:
    """``TUTORIAL_SCALE`` if set (validated), else ``gpu`` with an accelerator and ``ci`` without."""
    name = os.environ.get("TUTORIAL_SCALE", "").strip().lower()
    if not name:
        return "gpu" if has_accelerator() else "ci"
    if name not in SCALES:
        raise ValueError(f"TUTORIAL_SCALE={name!r} is not a preset; use one of {', '.join(SCALES)}")
    return name


def get_preset(name: str | None = None) -> Preset:
    """The preset ``name`` (default: from the environment), with ``TUTORIAL_MODEL`` applied.

    Settings follow the model: a pretrained model named at ``ci`` gets the ``small`` preset's
    settings (LoRA, learning rates and step counts for a pretrained model), and ``tiny`` named at
    ``small`` or ``full`` gets ``ci``'s, so a model is never trained with settings tuned for the other
    kind. The returned preset's ``name`` says whose settings it holds.
    """
    name = name or scale_name()
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; use one of {', '.join(SCALES)}")
    preset = PRESETS[name]
    model = os.environ.get("TUTORIAL_MODEL", "").strip()
    if not model:
        return preset
    if is_pretrained(model) and not is_pretrained(preset.model):
        preset = PRESETS["small"]
    elif not is_pretrained(model) and is_pretrained(preset.model):
        preset = PRESETS["ci"]
    return replace(preset, model=model)


def describe(preset: Preset | None = None) -> str:
    """One line naming the preset, model and device: every chapter prints it first."""
    preset = preset or get_preset()
    asked = scale_name()
    note = f" (TUTORIAL_SCALE={asked}; settings of {preset.name!r}, which suit this model)" if asked != preset.name else ""
    threads = f"  {describe_threads()}" if device_kind() == "cpu" else ""
    return f"preset={preset.name}  model={preset.model}  device={device_kind()}{threads}{note}"


def pretrained_preset(preset: Preset | None = None) -> Preset:
    """The preset chapter 9 runs a pretrained model at: ``preset`` itself when its model is
    pretrained (``small``, ``full``, or ``ci`` with ``TUTORIAL_MODEL``), else :data:`PRETRAINED_AT_CI`."""
    preset = preset or get_preset()
    return preset if is_pretrained(preset.model) else PRETRAINED_AT_CI


#: the RL algorithms of the loop, each the name of its ``GameSettings`` field and its settings class
RL_ALGORITHMS = {"reinforce": ReinforceSettings, "ppo": PPOSettings}


def rl_settings(game: str, preset: Preset, algo: str = "reinforce", **changes: Any):
    """A run's RL settings for ``game``, resolved in one place: chapter 5's REINFORCE, chapter 6's
    PPO or chapter 7's GRPO as the preset holds them (the class defaults where it holds none, the
    game's options under the algorithm's own), then ``changes`` (a command line's or a benchmark's).

    ``changes`` are fields of the settings; ``None`` keeps the preset's. ``env_options`` are added to
    the preset's options, not put in their place. ``iterations`` and ``save_every`` are GRPO's
    ``steps`` and ``save_steps``. Fewer ``turns_per_iteration`` than games side by side (or than
    PPO's minibatch) bring those down with them, unless ``changes`` name them too. Another number of
    ``iterations`` under a ``warmup_stable_decay`` schedule decays over the same share of the run
    (:func:`scaled_decay`), unless ``changes`` name ``decay_iterations`` too.
    """
    if algo == "grpo":
        settings = grpo_settings(game, preset)
        changes = {GRPO_NAMES.get(name, name): value for name, value in changes.items()}
        options = settings.env_options
    elif algo in RL_ALGORITHMS:
        game_settings = preset.game(game)
        settings = getattr(game_settings, algo) or RL_ALGORITHMS[algo]()
        options = {**game_settings.env_options, **settings.env_options}  # the algorithm's over the game's
    else:
        raise ValueError(f"unknown RL algorithm {algo!r}; use one of {', '.join([*RL_ALGORITHMS, 'grpo'])}")
    changes = {name: value for name, value in changes.items() if value is not None}
    unknown = sorted(set(changes) - {f.name for f in fields(settings)})
    if unknown:
        raise ValueError(f"{type(settings).__name__} has no setting {', '.join(unknown)}")
    changes["env_options"] = {**options, **changes.get("env_options", {})}  # the changes' over both
    if ("iterations" in changes and "decay_iterations" not in changes
            and getattr(settings, "lr_schedule", None) == "warmup_stable_decay"):
        # a recipe that decays over its last quarter still does when a run is shorter or longer
        changes["decay_iterations"] = scaled_decay(settings, changes["iterations"])
    turns = changes.get("turns_per_iteration")
    if turns is not None:
        changes.setdefault("num_envs", min(settings.num_envs, turns))
        if hasattr(settings, "minibatch_turns"):
            changes.setdefault("minibatch_turns", min(settings.minibatch_turns, turns))
    return replace(settings, **changes)  # the settings' own checks run on the result


def scaled_decay(settings, iterations: int) -> int:
    """The ``decay_iterations`` of ``settings`` scaled to a run of ``iterations``: the same share of
    the run, at least 1 and no more than the iterations after the warm-up (the settings' own check
    reports a run too short for any)."""
    share = settings.decay_iterations / settings.iterations
    return max(1, min(round(share * iterations), iterations - settings.warmup_iterations))


#: the loop settings that GRPO (TRL's trainer) names otherwise
GRPO_NAMES = {"iterations": "steps", "save_every": "save_steps"}


def grpo_settings(game: str, preset: Preset) -> GRPOSettings:
    """Chapter 7's GRPO settings for ``game`` (math, or tic-tac-toe's single moves) as the preset holds
    them, else the defaults with room for the game's longest answer."""
    return preset.game(game).grpo or GRPOSettings(max_completion_length=MAX_NEW_TOKENS[game])
