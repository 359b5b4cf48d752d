"""The collect-then-update loop that every RL algorithm of the book shares (chapters 5-7).

    result = run_rl(policy, "tictactoe", settings, lambda: Reinforce(policy, settings), out_dir="runs/rl-ttt")
    result.history[-1]        # the last iteration's metrics
    result.curve("success_rate")

REINFORCE (chapter 5) and PPO (chapter 6) differ in one thing: how a batch of episodes becomes a
weight update. That part is an :class:`Algorithm`. Everything around it is the same and lives here:

1. collect ``turns_per_iteration`` turns with the current policy (:func:`tutorial_lib.rollout.collect`),
   from fresh seeds each iteration (training seeds start at ``first_seed``, far from the evaluation
   seeds 0, 1, 2...; or cycle through a fixed split of ``train_seeds``), until ``iterations`` are done or ``token_budget`` action tokens sampled;
2. hand the rollout to the algorithm, which updates the weights and returns its metrics;
3. log the rollout's and the update's metrics (``metrics.csv`` and TensorBoard), with the time
   spent sampling and training;
4. every ``save_every`` iterations, checkpoint everything the next iteration reads -- the policy's
   trainable weights, the algorithm's optimiser, extra modules (a value head) and state (a
   learning-rate schedule), the random generators, the next seed -- so that ``resume=True``
   continues exactly the run that was stopped.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .cpu_threads import fit_threads
from .progress import progress_bar, quiet_transformers
from .rollout import Rollout, collect
from .tracking import MetricsLog, load_checkpoint, save_checkpoint


@dataclass
class RLSettings:
    """What every algorithm of the loop shares: collection, optimiser, logging. Each algorithm adds
    its own (:class:`~tutorial_lib.reinforce.ReinforceSettings`, :class:`~tutorial_lib.ppo.PPOSettings`).
    Defaults suit the tiny model on a CPU (chapter 5)."""

    #: collect-then-update iterations
    iterations: int = 30
    #: turns collected per iteration: episodes start until this many turns are played
    turns_per_iteration: int = 256
    #: games played side by side while collecting
    num_envs: int = 32
    learning_rate: float = 1e-4
    adam_betas: tuple[float, float] = (0.9, 0.95)
    max_grad_norm: float = 1.0
    #: turns per forward/backward pass (a micro-batch): memory, not maths; their gradients add up
    #: to one optimiser step
    microbatch_turns: int = 128
    #: sampling preset while collecting (``rl``: the model's own distribution)
    sampling: str = "rl"
    #: sampling temperature; the trainer scores with the same one, so the policy being trained is
    #: the tempered one, softmax(logits / T), and the sampler is still exactly that policy. Below 1
    #: a policy that rarely succeeds samples its best answers more often (chapter 6)
    temperature: float = 1.0
    #: options for the game (opponent, world...)
    env_options: dict[str, Any] = field(default_factory=dict)
    #: training episodes use seeds from here up, away from the evaluation seeds (0, 1, 2...)
    first_seed: int = 100_000
    #: cycle through a fixed set of this many seeds from ``first_seed`` (a training split, like
    #: GSM8K's) instead of a fresh game every episode (``None``)
    train_seeds: int | None = None
    #: stop early once this many action tokens have been sampled (``None``: run every iteration);
    #: how chapter 7 gives each algorithm the same budget
    token_budget: int | None = None
    #: checkpoint every this many iterations (and at the end)
    save_every: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive; got {self.temperature}")
        if self.train_seeds is not None and self.train_seeds < 1:
            raise ValueError(f"train_seeds must be at least 1 (or None); got {self.train_seeds}")
        for name in ("iterations", "turns_per_iteration", "num_envs", "microbatch_turns", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1; got {getattr(self, name)}")


class Algorithm:
    """How a rollout becomes an update. Subclasses set ``name`` and ``optimizer`` and define
    :meth:`update`; those with more state than the policy and the optimiser (a value head, a
    learning-rate schedule) also override :meth:`modules` and :meth:`state_dict`."""

    #: shown on the progress bar and written to ``rl_settings.json``
    name: str = ""
    optimizer: torch.optim.Optimizer

    def update(self, rollout: Rollout) -> dict[str, float]:
        """Train on ``rollout``; return this update's metrics."""
        raise NotImplementedError

    def modules(self) -> dict[str, torch.nn.Module]:
        """Trained modules besides the policy (checkpointed, and saved beside the final model)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Further state a resumed run needs (e.g. a learning-rate scheduler's)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Restore what :meth:`state_dict` returned."""


@dataclass
class RLResult:
    out_dir: Path
    #: one dict of metrics per iteration (also in ``out_dir/metrics.csv`` and TensorBoard)
    history: list[dict[str, float]]
    seconds: float
    #: the algorithm that trained (its optimiser, and modules such as PPO's value model)
    algorithm: Algorithm | None = None
    #: ``False`` for a part of a staged run (``stage=(i, n)``, i < n): checkpointed, no model saved yet
    finished: bool = True

    def curve(self, key: str) -> list[float]:
        return [row[key] for row in self.history if key in row]


def sampler_kl_sums(log_ratio: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """Two estimators of KL(sampler || trainer), summed over the masked action tokens.

    ``log_ratio`` is log pi_trainer - log pi_sampler on the sampler's own tokens (Schulman,
    "Approximating KL divergence", 2020): k1 = E[-log r] is unbiased but noisy and can go negative;
    k3 = E[r - 1 - log r] is unbiased and never negative. Both ~0 when the sampler is the policy.
    """
    with torch.no_grad():
        k1 = float((-log_ratio)[mask].sum())
        k3 = float((log_ratio.exp() - 1 - log_ratio)[mask].sum())
    return k1, k3


def clip_and_step(optimizer: torch.optim.Optimizer, max_grad_norm: float, finite_loss: bool = True) -> tuple[float, float]:
    """Clip the gradient of ``optimizer``'s parameters and step, unless the loss or the gradient is
    not finite: such a step would ruin the weights for good, so it is skipped and counted.
    Returns (gradient norm, 1.0 if skipped else 0.0)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm) if finite_loss else torch.tensor(float("nan"))
    if finite_loss and torch.isfinite(grad_norm):
        optimizer.step()
        return float(grad_norm), 0.0
    optimizer.zero_grad(set_to_none=True)
    # counted in the metrics too; said here because a run whose every step is skipped learns nothing
    # while its curves still look like a run's (it happened: benchmarks/results/small_preset_chapters_cpu.md)
    warnings.warn("an optimiser step was skipped: its loss or gradient was not finite (the run's "
                  "'skipped_steps' / 'skipped_step' metric counts them)", RuntimeWarning, stacklevel=2)
    return float(grad_norm), 1.0


def rollout_metrics(rollout: Rollout) -> dict[str, float]:
    """What every algorithm logs about its batch: returns, outcomes, sizes."""
    summary = rollout.summary()
    keep = ["episodes", "mean_return", "success_rate", "invalid_rate", "truncated_rate", "turns", "action_tokens",
            "win_rate", "draw_rate", "loss_rate", "accuracy", "format_accuracy", "mean_score"]
    metrics = {key: float(summary[key]) for key in keep if key in summary}
    metrics["turns_per_episode"] = float(summary["mean_steps"])
    return metrics


def write_run_settings(out_dir: Path, game: str, algo: str, settings) -> None:
    """``out_dir/rl_settings.json``: the game, the algorithm and every setting of the run."""
    (out_dir / "rl_settings.json").write_text(
        json.dumps({"game": game, "algo": algo, **asdict(settings)}, indent=1, default=str))


def run_progress_bar(algo: str, game: str, *, token_budget: int | None, steps: int, done_steps: int,
                     history: list[dict[str, float]], progress: bool):
    """A run's bar: sampled action tokens against the budget when there is one (the number of steps
    is then not known in advance), steps otherwise; a resumed run's bar starts where it stopped."""
    budgeted = token_budget is not None
    spent = min(sum(row.get("action_tokens", 0) for row in history), token_budget) if budgeted else 0
    return progress_bar(desc=f"{algo} {game}", disable=not progress, unit=" tokens" if budgeted else "it",
                        total=token_budget if budgeted else steps, initial=spent if budgeted else done_steps)


def save_final_model(policy, out_dir: Path, modules: dict[str, torch.nn.Module] | None = None) -> None:
    """The trained model and its tokenizer in ``out_dir/model`` (what ``load_policy`` and the CLI's
    ``evaluate --policy`` read), with extra modules (a value head) beside them as ``<name>.pt``."""
    with quiet_transformers():  # a bar for a file of a few MB would be the chapter's noise
        policy.model.save_pretrained(out_dir / "model")
    policy.tokenizer.save_pretrained(out_dir / "model")
    for name, module in (modules or {}).items():
        torch.save(module.state_dict(), out_dir / "model" / f"{name}.pt")


def run_rl(
    policy,
    game: str,
    settings: RLSettings,
    make_algorithm: Callable[[], Algorithm],
    *,
    out_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    stage: tuple[int, int] = (1, 1),
) -> RLResult:
    """Train ``policy`` in place on ``game``; logs, checkpoints and the final model go to ``out_dir``.

    ``settings`` is an :class:`RLSettings` (an algorithm's subclass); it supplies the
    collection settings (``iterations``, ``turns_per_iteration``, ``num_envs``, ``sampling``,
    ``env_options``, ``first_seed``, ``save_every``, ``seed``). ``make_algorithm`` is called once,
    after the random generators are seeded, so a freshly initialised module (a value head) is the
    same in every run with the same seed.

    ``stage=(i, n)`` runs only the i-th of n equal parts of the iterations, so that a long run fits
    in several notebook cells: part i < n ends at a checkpoint (not a saved model), and part i + 1
    resumes from it, exactly (the schedule still spans all ``settings.iterations``).
    """
    part, parts = stage
    if not 1 <= part <= parts:
        raise ValueError(f"stage must be (i, n) with 1 <= i <= n; got {stage}")
    resume = resume or part > 1
    stop = round(settings.iterations * part / parts)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = policy.model
    torch.manual_seed(settings.seed)
    algorithm = make_algorithm()
    start, next_seed = 0, settings.first_seed
    if resume:
        if not (out_dir / "checkpoint").exists():
            raise FileNotFoundError(f"nothing to resume in {out_dir}: no checkpoint" +
                                    (f" (run stage {part - 1} of {parts} first)" if part > 1 else ""))
        start, state = load_checkpoint(out_dir / "checkpoint", model, algorithm.optimizer, modules=algorithm.modules())
        next_seed = state["next_seed"]
        algorithm.load_state_dict(state.get("algorithm", {}))
    write_run_settings(out_dir, game, algorithm.name, settings)
    log = MetricsLog(out_dir, resume_from=start if resume else None)
    history = list(log.rows)
    began = time.perf_counter()
    # with a token budget the bar counts sampled tokens (the number of iterations is not known)
    budgeted = settings.token_budget is not None
    spent = sum(row.get("action_tokens", 0) for row in history)
    bar = run_progress_bar(algorithm.name, game, token_budget=settings.token_budget, steps=settings.iterations,
                           done_steps=start, history=history, progress=progress)
    over_budget = budgeted and spent >= settings.token_budget  # a resumed part after the budget ran out
    try:
        for iteration in range(start, stop if not over_budget else start):
            tick = time.perf_counter()
            seeds = range(next_seed, next_seed + settings.turns_per_iteration)  # >= one turn per episode
            if settings.train_seeds is not None:  # a fixed training split, cycled through
                seeds = [settings.first_seed + (s - settings.first_seed) % settings.train_seeds for s in seeds]
            rollout = collect(policy, game, seeds, env_options=settings.env_options, num_envs=settings.num_envs,
                              turn_budget=settings.turns_per_iteration, sampling=settings.sampling,
                              temperature=None if settings.temperature == 1 else settings.temperature)
            next_seed += len(rollout.records)
            sampled = time.perf_counter()
            metrics = rollout_metrics(rollout)
            fit_threads()
            metrics.update(algorithm.update(rollout))
            metrics["sample_seconds"] = sampled - tick
            metrics["train_seconds"] = time.perf_counter() - sampled
            log.write(iteration + 1, metrics)
            history.append({"step": iteration + 1, **metrics})
            # refresh=False: a postfix must not redraw the bar (in the book every redraw is a line)
            bar.set_postfix(ret=f"{metrics['mean_return']:.2f}", success=f"{metrics['success_rate']:.2f}", refresh=False)
            spent += metrics["action_tokens"]
            bar.update(min(metrics["action_tokens"], settings.token_budget - bar.n) if budgeted else 1)
            over_budget = budgeted and spent >= settings.token_budget
            if (iteration + 1) % settings.save_every == 0 or iteration + 1 in (stop, settings.iterations) or over_budget:
                save_checkpoint(out_dir / "checkpoint", model, algorithm.optimizer, step=iteration + 1,
                                state={"next_seed": next_seed, "algorithm": algorithm.state_dict()},
                                modules=algorithm.modules())
            if over_budget:
                break
    finally:
        bar.close()
        log.close()
    model.eval()
    if part < parts and not over_budget:  # a part of the run: the next part resumes from its checkpoint
        return RLResult(out_dir, history, time.perf_counter() - began, algorithm, finished=False)
    save_final_model(policy, out_dir, algorithm.modules())
    return RLResult(out_dir, history, time.perf_counter() - began, algorithm)
