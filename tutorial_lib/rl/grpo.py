"""GRPO through TRL's ``GRPOTrainer``, a thin wrapper (chapter 7): math word problems, or any
single-turn task with a checkable answer through ``dataset`` and ``reward`` (chapter 7's
tic-tac-toe moves: :mod:`tutorial_lib.rl.tictactoe_moves`). TRL computes the update; this module
supplies what makes it the book's GRPO:

    policy = sft_policy("math", preset)                      # or load_policy("tiny")
    result = train_grpo(policy, GRPOSettings(steps=30), out_dir="runs/grpo-math")
    result.history[-1]        # mean_return, accuracy, format_accuracy, action_tokens, entropy, seconds...

* the game's reward (:func:`math_reward` plays each completion as one step of
  :class:`~tutorial_lib.envs.math_problems.MathEnv`; it never raises on garbage);
* the policy's prompts (:func:`math_prompt_dataset`, conversational, token for token what
  ``LanguagePolicy`` feeds ``generate``: ``tests/test_grpo.py``);
* the policy's sampler (temperature, ``top_k=0``, ``top_p=1`` set explicitly), no reference model
  by default (``beta=0``), TRL's loss normalisation and reward scaling as settings;
* the book's metric names in ``metrics.csv`` and TensorBoard, and a deterministic CPU run.

Group advantages, the loss variants and what the ``ci`` run does and does not learn are chapter 7's
subject. Multi-turn games are not trained through TRL: its ``environment_factory`` needs a chat
template with tool calls and plays one growing conversation with one reward per rollout, where
this book's games build a fresh prompt each turn and reward each turn; chapter 7 and
``benchmarks/results/grpo_trl_multiturn.md`` give the details. They train with the book's own loop
(:mod:`tutorial_lib.rl.reinforce`, :mod:`tutorial_lib.rl.ppo`).
"""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Hashable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch

from tutorial_lib import envs
from tutorial_lib.envs.math_problems import MathEnv, MathProblem
from tutorial_lib.lm.lm_parts import unwrap_peft
from tutorial_lib.lm.policies import MAX_NEW_TOKENS
from tutorial_lib.lm.prompts import Turn, build_messages
from tutorial_lib.rl.rl_loop import RLResult, run_progress_bar, save_final_model, write_run_settings
from tutorial_lib.runtime import distributed, durable
from tutorial_lib.runtime.cpu_threads import trainer_callback as threads_callback
from tutorial_lib.runtime.device import default_dtype, device_kind
from tutorial_lib.runtime.progress import quiet_transformers
from tutorial_lib.runtime.tracking import MetricsLog

#: TRL's token-aggregation rules this module offers (see detail 5 of the module docstring)
LOSS_TYPES = ("dapo", "grpo", "dr_grpo", "bnpo")
#: how rewards are scaled into advantages: by the group's std, the batch's std, or not at all
#: (Dr. GRPO: dividing by the group std over-weights groups that are nearly all right or all wrong)
REWARD_SCALINGS = ("group", "batch", "none")
#: the game GRPO trains on here (single-turn; see the module docstring for multi-turn games)
GAME = "math"


@dataclass
class GRPOSettings:
    """Settings of a GRPO run. Defaults suit the tiny model on math at the ``ci`` scale, on a CPU."""

    #: optimiser steps; each step samples a fresh batch of problems
    steps: int = 40
    #: distinct problems per step
    prompts_per_step: int = 4
    #: answers sampled per problem: the group whose mean reward is each answer's baseline (G). With
    #: the chapter-4 model right ~5% of the time, 16 leaves a quarter to half of the groups with a
    #: signal (a right answer among them); 8 left three quarters with none
    num_generations: int = 16
    #: 1e-4: 3e-4 and above drifted from the SFT model (longer, less accurate answers) within 60 steps
    learning_rate: float = 1e-4
    #: KL coefficient to the starting model; 0 builds no reference model
    beta: float = 0.0
    #: token-loss aggregation: ``dapo`` (tokens of the whole batch), ``grpo`` (mean per answer,
    #: length-biased), ``dr_grpo`` (constant), ``bnpo`` (tokens of the micro-batch)
    loss_type: str = "dapo"
    #: advantage scaling: ``group`` (GRPO), ``batch`` or ``none`` (Dr. GRPO)
    scale_rewards: str = "group"
    #: sampling temperature (1.0: the sampler is the policy; TRL divides the trainer's logits by it too)
    temperature: float = 1.0
    #: longest answer in tokens; longer ones are cut (math answers with working need ~60-128)
    max_completion_length: int = MAX_NEW_TOKENS[GAME]
    #: completions per forward/backward pass (memory, not maths: the gradients of all of them add
    #: up to ONE optimiser step); ``None``: the whole batch at once
    microbatch_size: int | None = None
    adam_betas: tuple[float, float] = (0.9, 0.95)
    max_grad_norm: float = 1.0
    #: learning-rate schedule (a ``transformers`` scheduler name): constant, as chapter 5's REINFORCE
    lr_scheduler: str = "constant"
    #: recompute activations in the backward pass (TRL's default is on; it only costs time on the
    #: tiny model, and saves memory on a real one)
    gradient_checkpointing: bool = False
    #: options of the math game: where problems come from and how hard they are
    env_options: dict[str, Any] = field(default_factory=lambda: {"source": "generated", "level": 1})
    #: training problems use seeds from here up, away from the evaluation seeds (0, 1, 2...)
    first_seed: int = 100_000
    #: stop early once this many completion tokens have been sampled (``None``: all ``steps``);
    #: how chapter 7 gives GRPO the same budget as REINFORCE and PPO
    token_budget: int | None = None
    #: save a resumable Trainer checkpoint every this many steps (``None``: only the final model)
    save_steps: int | None = None
    seed: int = 0
    #: further ``trl.GRPOConfig`` fields, e.g. ``{"num_iterations": 2, "epsilon_high": 0.28}``
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("steps", "prompts_per_step", "max_completion_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1; got {getattr(self, name)}")
        if self.num_generations < 2:
            raise ValueError(f"num_generations must be at least 2 (a group of one has no baseline); "
                             f"got {self.num_generations}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive; got {self.learning_rate}")
        if self.beta < 0:
            raise ValueError(f"beta (the KL coefficient) must be >= 0; got {self.beta}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive (GRPO samples); got {self.temperature}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}; got {self.loss_type!r}")
        if self.scale_rewards not in REWARD_SCALINGS:
            raise ValueError(f"scale_rewards must be one of {', '.join(REWARD_SCALINGS)}; got {self.scale_rewards!r}")
        if self.microbatch_size is not None and (
            self.microbatch_size < 1 or self.completions_per_step % self.microbatch_size
        ):
            raise ValueError(
                f"microbatch_size must divide the {self.completions_per_step} completions of a step "
                f"(prompts_per_step x num_generations); got {self.microbatch_size}"
            )
        if self.token_budget is not None and self.token_budget < 1:
            raise ValueError(f"token_budget must be at least 1 or None; got {self.token_budget}")
        if self.save_steps is not None and self.save_steps < 1:
            raise ValueError(f"save_steps must be at least 1 or None; got {self.save_steps}")
        if self.max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be positive; got {self.max_grad_norm}")

    @property
    def completions_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations


# -- the reward: the game's own scoring ----------------------------------------------------------
def completion_text(completion: Any) -> str:
    """The answer text of one TRL completion: a string (standard format) or a list of messages
    (conversational format: the last message's content). Anything else is no answer: ``""``."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content")
        return content if isinstance(content, str) else ""
    return ""


def score_answer(question: str, answer: str | Fraction, text: str) -> tuple[float, dict[str, Any]]:
    """Play ``text`` as the answer to one problem with :class:`MathEnv`; returns (reward, info).

    The game is given just this problem, so its own parser and scoring decide (``info`` holds
    ``correct``, ``formatted``, ``parse_error``...). ``answer`` is the number as a ``Fraction`` or
    its string (``"42"``, ``"7/2"``)."""
    env = MathEnv(problems=[MathProblem(question, "", Fraction(answer))])
    env.reset(seed=0)
    _, reward, _, _, info = env.step(text if isinstance(text, str) else "")
    return reward, info


#: why a tied group's answers all scored alike -> the name its share of the groups is logged under
TIED_KINDS = {"right": "tied_right", "format_only": "tied_format_only", "no_answer": "tied_no_answer"}


def answer_kind(info: dict[str, Any]) -> str:
    """``"right"`` (reward 1), ``"format_only"`` (a wrong number after ``####``: 0.1) or
    ``"no_answer"`` (0), from the math game's ``info`` for one answer."""
    return "right" if info["correct"] else "format_only" if info["formatted"] else "no_answer"


def tied_group_shares(kinds: Sequence[str], problems: Sequence[Hashable]) -> dict[str, float]:
    """Of the groups in a batch, the share whose answers all scored alike, told apart by why.

    A group is a run of consecutive answers to the same problem (``problems``: one id per answer,
    the dataset's ``seed`` column), as TRL lays a step's groups out. A tied group has zero reward
    spread, so GRPO learns nothing from it (TRL's ``frac_reward_zero_std`` counts them all); this
    says whether they were problems the policy always gets right, always answers in the format with
    a wrong number, or never answers. A group of one answer counts as tied, as in TRL.
    """
    if len(kinds) != len(problems):
        raise ValueError(f"{len(kinds)} answers but {len(problems)} problem ids")
    groups = [[kind for kind, _ in run] for _, run in itertools.groupby(zip(kinds, problems), key=lambda x: x[1])]
    shares = dict.fromkeys(TIED_KINDS.values(), 0.0)
    for group in groups:
        if len(set(group)) == 1:
            shares[TIED_KINDS[group[0]]] += 1 / len(groups)
    return shares


def math_reward(completions: Sequence[Any], answer: Sequence[str], question: Sequence[str] | None = None,
                log_metric=None, seed: Sequence[int] | None = None, **kwargs) -> list[float]:
    """TRL reward function: the math game's reward for each completion (1.0 / 0.1 / 0.0).

    ``answer``, ``question`` and ``seed`` are columns of :func:`math_prompt_dataset`, which TRL
    passes by name. When TRL supplies ``log_metric`` (it does), the batch's answer and format
    accuracy are logged too (``accuracy``, ``format_accuracy``), and, given the ``seed`` column,
    the shares of tied groups by kind (:func:`tied_group_shares`). Never raises on the completions'
    content.
    """
    if len(answer) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(answer)} answers")
    questions = question if question is not None else [""] * len(completions)
    rewards, kinds, formatted = [], [], 0
    for completion, q, a in zip(completions, questions, answer):
        reward, info = score_answer(q, a, completion_text(completion))
        rewards.append(reward)
        kinds.append(answer_kind(info))
        formatted += bool(info["formatted"])
    if log_metric is not None and rewards:
        log_metric("accuracy", kinds.count("right") / len(rewards))
        log_metric("format_accuracy", formatted / len(rewards))
        if seed is not None:
            for name, share in tied_group_shares(kinds, seed).items():
                log_metric(name, share)
    return rewards


# -- the prompts: the policy's own ----------------------------------------------------------------
def math_prompt_dataset(seeds: Iterable[int], *, env_options: dict[str, Any] | None = None):
    """One row per seed: the math problem the game deals for that seed, as TRL's conversational
    ``prompt`` (the messages :class:`LanguagePolicy` renders), with ``question``, ``answer`` (a
    string) and ``seed`` columns for the reward. ``env_options`` as for ``envs.make("math", ...)``:
    ``level`` (1, 2, 3 or ``"mixed"``), ``source``, ``split``."""
    import datasets

    seeds = list(seeds)
    if not seeds:
        raise ValueError("no seeds: the dataset would be empty")
    env = envs.make(GAME, **(env_options or {}))
    rows = []
    for seed in seeds:
        observation, info = env.reset(seed=seed)
        rows.append({
            "prompt": build_messages(GAME, env.task, [Turn(observation, info=info)]),
            "question": env.problem.question,
            "answer": str(env.problem.answer),
            "seed": seed,
        })
    return datasets.Dataset.from_list(rows)


# -- training ---------------------------------------------------------------------------------------
#: TRL's log key -> the book's name (REINFORCE's where the meaning is the same)
_RENAMED = {
    "reward": "mean_return",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "frac_reward_zero_std",
    **{name: name for name in TIED_KINDS.values()},
    "accuracy": "accuracy",
    "format_accuracy": "format_accuracy",
    "entropy": "entropy",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
    "completions/mean_length": "mean_action_tokens",
    "completions/max_length": "max_action_tokens",
    "completions/clipped_ratio": "clipped_ratio",
    "kl": "kl_ref",
    "sample_seconds": "sample_seconds",
    # tic-tac-toe moves (tutorial_lib.rl.tictactoe_moves.minimax_reward)
    "valid_rate": "valid_rate",
    "optimal_rate": "optimal_rate",
}


def _trainer_class():
    """``GRPOTrainer`` that also times its sampling (logged as ``sample_seconds``)."""
    from trl import GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate(self, prompts):
            start = time.perf_counter()
            try:
                return super()._generate(prompts)
            finally:
                mode = "train" if self.model.training else "eval"
                self._metrics[mode]["sample_seconds"].append(time.perf_counter() - start)

    return TimedGRPOTrainer


def _history_callback(settings: GRPOSettings, log: MetricsLog, history: list[dict[str, float]], bar):
    """A ``TrainerCallback`` turning each of TRL's per-step logs into one row of ``history``."""
    from transformers import TrainerCallback

    class HistoryCallback(TrainerCallback):
        def __init__(self):
            self.last = time.perf_counter()

        def on_train_begin(self, args, state, control, **kwargs):
            self.last = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "train_runtime" in logs:  # the end-of-training summary, not a step
                return
            now = time.perf_counter()
            row = {new: float(logs[old]) for old, new in _RENAMED.items() if logs.get(old) is not None}
            # a step that reused an earlier batch (``extra={"num_iterations": 2}``) sampled nothing
            episodes = settings.completions_per_step if "mean_return" in row else 0
            row["episodes"] = row["turns"] = float(episodes)  # single-turn: one turn per episode
            if "accuracy" in row:
                row["success_rate"] = row["accuracy"]
            if "format_accuracy" in row:
                row["invalid_rate"] = 1.0 - row["format_accuracy"]
            if "valid_rate" in row:
                row["invalid_rate"] = 1.0 - row["valid_rate"]
            row["action_tokens"] = float(round(row.get("mean_action_tokens", 0.0) * episodes))
            row["seconds"] = now - self.last
            row["train_seconds"] = row["seconds"] - row.get("sample_seconds", 0.0)
            self.last = now
            log.write(state.global_step, row)
            history.append({"step": state.global_step, **row})
            spent = sum(r.get("action_tokens", 0.0) for r in history)
            if settings.token_budget is None:
                bar.update(state.global_step - bar.n)
            else:  # the bar counts sampled tokens, as rl_loop's does under a budget
                bar.update(min(spent, settings.token_budget) - bar.n)
                if spent >= settings.token_budget:
                    control.should_training_stop = True
            if "mean_return" in row:
                shown = {name: f"{row[key]:.2f}" for name, key in (("acc", "accuracy"), ("optimal", "optimal_rate"))
                         if key in row}
                bar.set_postfix(ret=f"{row['mean_return']:.2f}", **shown, refresh=False)

    return HistoryCallback()


def grpo_config(settings: GRPOSettings, out_dir: str | Path):
    """The ``trl.GRPOConfig`` for ``settings`` (one generation batch per optimiser step, log every step)."""
    from trl import GRPOConfig

    batch = settings.completions_per_step
    micro = settings.microbatch_size or batch
    processes = distributed.num_processes()  # accelerate launch: each process a share of every micro-batch
    if micro % processes:
        raise ValueError(f"a micro-batch of {micro} completions does not split over {processes} processes")
    fields = dict(
        output_dir=str(out_dir),
        max_steps=settings.steps,
        per_device_train_batch_size=micro // processes,
        gradient_accumulation_steps=batch // micro,  # = steps_per_generation: one batch per step
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        learning_rate=settings.learning_rate,
        lr_scheduler_type=settings.lr_scheduler,
        warmup_steps=0,
        adam_beta1=settings.adam_betas[0],
        adam_beta2=settings.adam_betas[1],
        weight_decay=0.0,
        max_grad_norm=settings.max_grad_norm,
        beta=settings.beta,
        loss_type=settings.loss_type,
        scale_rewards=settings.scale_rewards,
        # the sampler is the policy: every knob explicit, so no checkpoint default slips in
        temperature=settings.temperature,
        top_k=0,
        top_p=1.0,
        min_p=None,
        repetition_penalty=1.0,
        activation_checkpointing=settings.gradient_checkpointing,
        logging_steps=1,
        save_strategy="steps" if settings.save_steps else "no",
        save_steps=settings.save_steps or 500,
        report_to=[],
        disable_tqdm=True,
        seed=settings.seed,
        data_seed=settings.seed,
        # mixed precision where the hardware has it; full float32 on CPU (exact, and as fast there)
        bf16=default_dtype() == torch.bfloat16,
        use_cpu=device_kind() == "cpu",
    )
    fields.update(settings.extra)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        return GRPOConfig(**fields)


@contextmanager
def _quiet():
    """TRL's and transformers' informational lines and deprecation notices are not the chapter's point."""
    with quiet_transformers(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"trl\.")
        yield


def build_trainer(policy, settings: GRPOSettings, dataset, *, out_dir: str | Path, reward=None):
    """TRL's ``GRPOTrainer`` for ``policy`` on ``dataset`` with ``reward`` (TRL's reward-function
    signature; :func:`math_reward` by default), console output off.

    With ``beta > 0`` the reference model is a frozen copy of the policy's current weights (under
    PEFT: the model with its adapters disabled, TRL's way). Note that TRL patches
    ``policy.model.forward`` with a fused log-prob head (plain calls behave as before);
    :func:`train_grpo` removes the patch when it is done.
    """
    from transformers import PrinterCallback, ProgressCallback

    with _quiet():
        trainer = _trainer_class()(
            model=policy.model,
            reward_funcs=reward or math_reward,
            args=grpo_config(settings, out_dir),
            train_dataset=dataset,
            processing_class=policy.tokenizer,
        )
    trainer.remove_callback(PrinterCallback)  # prints every log dict when tqdm is off
    trainer.remove_callback(ProgressCallback)  # ours is drawn by the history callback
    trainer.add_callback(threads_callback())
    trainer.add_callback(durable.sealing_callback())  # a checkpoint is resumed from once written whole
    if trainer.ref_model is not None:
        # TRL builds the reference by reloading the model from ``config._name_or_path``: the weights
        # on disk, not the policy as it is now (after an earlier RL run, say). The KL is to the start
        # of THIS run, so copy the current weights in.
        reference = trainer.accelerator.unwrap_model(trainer.ref_model)
        reference.load_state_dict(policy.model.state_dict())
        reference.requires_grad_(False)  # TRL only ever runs it under no_grad; frozen says so
    return trainer


def train_grpo(
    policy,
    settings: GRPOSettings | None = None,
    *,
    out_dir: str | Path,
    progress: bool = True,
    resume: bool = False,
    dataset=None,
    reward=None,
    game: str = GAME,
) -> RLResult:
    """Fine-tune ``policy.model`` in place with GRPO on math; logs, checkpoints and the final model
    (``out_dir/model``, with the tokenizer) go to ``out_dir``.

    ``dataset`` replaces the generated training problems (a :func:`math_prompt_dataset`, e.g. over
    GSM8K with ``env_options={"source": "gsm8k"}``); by default there is one fresh problem per
    prompt of every step. ``resume=True`` continues from the last checkpoint in ``out_dir``
    (``save_steps`` must have been set). Another single-turn task brings its own ``dataset``,
    ``reward`` and ``game`` name (the log's label): chapter 7's tic-tac-toe moves
    (:mod:`tutorial_lib.rl.tictactoe_moves`).
    """
    settings = settings or GRPOSettings()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if game != GAME and (dataset is None or reward is None):
        raise ValueError(f"GRPO on {game!r} needs both its dataset and its reward function")
    if dataset is None:
        seeds = range(settings.first_seed, settings.first_seed + settings.steps * settings.prompts_per_step)
        dataset = math_prompt_dataset(seeds, env_options=settings.env_options)
    checkpoint = _last_checkpoint(out_dir) if resume else None
    if resume and checkpoint is None:
        raise FileNotFoundError(f"no checkpoint-* folder in {out_dir} to resume from; start without resume "
                                "(and set GRPOSettings.save_steps to write checkpoints)")
    main = distributed.is_main()  # under accelerate launch one process writes the outputs
    if main:
        write_run_settings(out_dir, game, "GRPO", settings)
    resumed_step = int(checkpoint.name.split("-")[-1]) if checkpoint else None
    log = MetricsLog(out_dir, resume_from=resumed_step, files=main)
    history: list[dict[str, float]] = list(log.rows)
    model = policy.model
    base = unwrap_peft(model)
    patched_before = "forward" in vars(base)
    bar = run_progress_bar("GRPO", game, token_budget=settings.token_budget, steps=settings.steps,
                           done_steps=resumed_step or 0, history=history, progress=progress and main)
    began = time.perf_counter()
    try:
        trainer = build_trainer(policy, settings, dataset, out_dir=out_dir, reward=reward)
        trainer.add_callback(_history_callback(settings, log, history, bar))
        with _quiet():
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        bar.close()
        log.close()
        if not patched_before and "forward" in vars(base):
            # TRL patched the model's forward with a fused log-prob head; give back the plain model
            del base.forward
    model.eval()
    save_final_model(policy, out_dir)
    return RLResult(out_dir, history, time.perf_counter() - began)


def _last_checkpoint(out_dir: Path) -> Path | None:
    """The newest checkpoint written whole (a half-written one, from a killed run, is deleted)."""
    complete = durable.trainer_checkpoints(out_dir)
    return complete[-1] if complete else None
