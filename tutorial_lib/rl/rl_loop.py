"""The collect-then-update loop of an RL run, and the contract an algorithm meets (chapters 5-7, 10).

Holds :class:`Algorithm` (what the loop needs of REINFORCE and PPO), :class:`Run` (one run's
seeding, collection, logging, checkpoints and final model), :class:`RLResult` and :func:`train`,
the one loop both algorithms run in:

    result = train(PPO, policy, "tictactoe", PPOSettings(iterations=20), out_dir="runs/ppo-ttt")

    run = Run(policy, game, settings, out_dir="runs/ppo-ttt")   # what train does: seeds torch
    ppo = PPO(policy, settings)                                  # fresh modules from the run's seed
    run.restore(ppo)                                             # a resumed run: its checkpoint
    for _ in run.iterations():
        rollout = run.collect()                                  # turns from fresh seeds, the current policy
        metrics = ppo.update(rollout)                            # the algorithm: advantages, loss, steps
        run.end_iteration(metrics, ppo)                          # log; checkpoint when it is time
    result = run.finish(ppo)                                     # the model in out_dir/model

With ``validate_every`` the run also plays held-out greedy games before the first iteration and
every few iterations, and its model is the best weights it passed through, the start included
(:mod:`~tutorial_lib.rl.validation`). ``resume=True`` (or ``stage=(i, n)`` over notebook cells)
continues a run exactly. What an update is built from lives in modules of its own:
:mod:`~tutorial_lib.rl.settings`, :mod:`~tutorial_lib.rl.whole_batch` (statistics over every
process's turns), :mod:`~tutorial_lib.rl.update_step` (precision, micro-batches, the optimiser
step), :mod:`~tutorial_lib.rl.kl` and :mod:`~tutorial_lib.rl.schedules`. Imports ``runtime`` and
``rl``'s ``rollout``, ``validation``, ``settings`` and ``whole_batch``; nothing of an algorithm.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from tutorial_lib.rl.rollout import Rollout, collect
from tutorial_lib.rl.settings import RLSettings
from tutorial_lib.rl.validation import Validation
from tutorial_lib.rl.whole_batch import whole_batch
from tutorial_lib.runtime import distributed, durable
from tutorial_lib.runtime.cpu_threads import fit_threads
from tutorial_lib.runtime.progress import progress_bar, quiet_transformers
from tutorial_lib.runtime.tracking import (
    MetricsLog,
    has_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)


class Algorithm(Protocol):
    """What :class:`Run` and :func:`train` need of an RL algorithm (REINFORCE's and PPO's shape):
    built as ``Algorithm(policy, settings)``, it learns from each iteration's rollout with
    :meth:`update`. Inside, both algorithms read the same: ``prepare`` the rollout (a ``TurnBatch``
    with advantages, and what to log of it), then ``step`` the optimiser on it."""

    #: the name in the progress bar and ``rl_settings.json``
    name: str
    #: the policy it trains (a :class:`~tutorial_lib.lm.policies.LanguagePolicy`)
    policy: Any
    #: the settings class a run of it takes (its defaults: ``train``'s when given none)
    settings_class: type[RLSettings]
    settings: RLSettings
    #: every trainable parameter's optimiser (checkpointed with the weights)
    optimizer: torch.optim.Optimizer

    def update(self, rollout: Rollout) -> dict[str, float]:
        """Learn from this process's share of the iteration's episodes; return the metrics to log."""

    def modules(self) -> dict[str, torch.nn.Module]:
        """Modules beside the policy (a value head), checkpointed and saved with the model."""

    def state_dict(self) -> dict[str, Any]:
        """Anything else the next iteration reads (a learning-rate schedule)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class RLResult:
    """What a run (:func:`train`, or GRPO's ``train_grpo``) returns: where it wrote, what it logged."""

    out_dir: Path
    #: one dict of metrics per iteration (also in ``out_dir/metrics.csv`` and TensorBoard)
    history: list[dict[str, float]]
    seconds: float
    #: the algorithm that trained (its optimiser, and modules such as PPO's value model)
    algorithm: Algorithm | None = None
    #: ``False`` for a part of a staged run (``stage=(i, n)``, i < n): checkpointed, no model saved yet
    finished: bool = True
    #: with ``validate_every``: the validation scores by iteration and the one chosen as the model
    #: (:meth:`~tutorial_lib.rl.validation.Validation.summary`; also ``out_dir/validation.json``)
    validation: dict[str, Any] | None = None

    def curve(self, key: str) -> list[float]:
        return [row[key] for row in self.history if key in row]


def rollout_metrics(rollout: Rollout) -> dict[str, float]:
    """What every algorithm logs about its batch: returns, outcomes, sizes."""
    summary = rollout.summary()
    keep = ["episodes", "mean_return", "success_rate", "invalid_rate", "truncated_rate", "turns", "action_tokens",
            "win_rate", "draw_rate", "loss_rate", "accuracy", "format_accuracy", "mean_score"]
    metrics = {key: float(summary[key]) for key in keep if key in summary}
    metrics["turns_per_episode"] = float(summary["mean_steps"])
    return metrics


def write_run_settings(out_dir: Path, game: str, algo: str, settings) -> None:
    """``out_dir/rl_settings.json``: the game, the algorithm and every setting of the run (and the
    number of processes, when several ran it)."""
    processes = {"processes": distributed.num_processes()} if distributed.launched() else {}
    durable.write_text(out_dir / "rl_settings.json",
        json.dumps({"game": game, "algo": algo, **processes, **asdict(settings)}, indent=1, default=str))


def warn_if_schedule_changed(out_dir: Path, settings: RLSettings, done: int) -> None:
    """Warn when a run is resumed with another number of iterations under a learning-rate schedule
    that spans the run (``warmup_cosine``, ``warmup_stable_decay``): its first ``done`` iterations
    followed the schedule of the shorter or longer run, so the result is not the run of
    ``settings.iterations`` begun afresh (a constant rate, or a resume with the same iterations after
    an interruption, continues exactly)."""
    path = out_dir / "rl_settings.json"
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # a run from before rl_settings.json, or one never written: nothing to compare
    was, now = before.get("iterations"), settings.iterations
    schedules = {before.get("lr_schedule", "constant"), settings.lr_schedule}
    if was is not None and was != now and schedules != {"constant"}:
        warnings.warn(f"resuming a run of {was} iterations as one of {now}: its learning-rate schedule "
                      f"({settings.lr_schedule}) spans the run, so its first {done} iterations followed the "
                      f"schedule of a {was}-iteration run; the result is not the {now}-iteration run begun afresh",
                      stacklevel=3)


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
    ``evaluate --policy`` read), with extra modules (a value head) beside them as ``<name>.pt``.
    Written by the main process, whole (a crash leaves the older model or this one); the others wait
    until it is there."""
    if not distributed.is_main():
        distributed.wait_for_everyone()
        return
    with durable.building(out_dir / "model") as staging:
        with quiet_transformers():  # a bar for a file of a few MB would be the chapter's noise
            policy.model.save_pretrained(staging)
        policy.tokenizer.save_pretrained(staging)
        for name, module in (modules or {}).items():
            torch.save(module.state_dict(), staging / f"{name}.pt")
    distributed.wait_for_everyone()


def decorrelate(policy, seed: int) -> None:
    """Give a process other than the main one its own random stream (and its policy's, if seeded)."""
    rank = distributed.process_index()
    torch.manual_seed(seed + 1_000_003 * rank)
    if getattr(policy, "seed", None) is not None:
        policy.seed += 1_000_003 * rank


def restore_process_rng(saved: dict[str, Any], out_dir: Path) -> None:
    """After :func:`~tutorial_lib.runtime.tracking.load_checkpoint` (which restored the main process's
    generators): this process's own, from a checkpoint written by as many processes."""
    streams = saved.get("process_rng")
    written_by = len(streams) if streams else 1
    if written_by != distributed.num_processes():
        raise ValueError(f"the checkpoint in {out_dir} was written by {written_by} process(es); resume it with as "
                         f"many (now {distributed.num_processes()}): each process's random state is in it")
    if streams:
        set_rng_state(streams[distributed.process_index()])


class Run:
    """One RL run in ``out_dir``: seeding, resuming, collecting, logging, checkpointing, the final
    model. :func:`train`'s loop calls it (see the module docstring); it calls nothing back.

    ``settings`` is an :class:`RLSettings` (an algorithm's subclass). ``stage=(i, n)`` runs only the
    i-th of n equal parts of the iterations, so that a long run fits in several notebook cells: part
    i < n ends at a checkpoint (not a saved model), and part i + 1 resumes from it, exactly (the
    schedule still spans all ``settings.iterations``).
    """

    def __init__(self, policy, game: str, settings: RLSettings, *, out_dir: str | Path,
                 resume: bool = False, progress: bool = True, stage: tuple[int, int] = (1, 1)):
        part, parts = stage
        if not 1 <= part <= parts:
            raise ValueError(f"stage must be (i, n) with 1 <= i <= n; got {stage}")
        self.policy, self.game, self.settings = policy, game, settings
        self.part, self.parts, self.progress = part, parts, progress
        self.resume = resume or part > 1
        self.stop = round(settings.iterations * part / parts)
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.start, self.next_seed = 0, settings.first_seed
        self.validation = Validation(game, settings) if settings.validate_every else None
        # before the algorithm builds its modules: a fresh value head is the same in every run with this seed
        torch.manual_seed(settings.seed)

    def restore(self, algorithm: Algorithm) -> None:
        """Once the algorithm exists: a resumed run loads its checkpoint into it (the weights, the
        optimiser, its modules and state, the random generators, the next seed). Opens the metrics
        log and the progress bar."""
        if self.resume:
            # the newest complete checkpoint, after a crash in the middle of writing one
            if not has_checkpoint(self.out_dir / "checkpoint"):
                raise FileNotFoundError(f"nothing to resume in {self.out_dir}: no checkpoint" +
                                        (f" (run stage {self.part - 1} of {self.parts} first)" if self.part > 1 else ""))
            self.start, saved = load_checkpoint(self.out_dir / "checkpoint", self.policy.model, algorithm.optimizer,
                                                modules=algorithm.modules())
            self.next_seed = saved["next_seed"]
            algorithm.load_state_dict(saved.get("algorithm", {}))
            restore_process_rng(saved, self.out_dir)
            if self.validation is not None:
                self.validation.load_state_dict(saved.get("validation", {}))
        elif distributed.process_index() > 0:
            # the modules are built (the same in every process); from here on each process samples
            # its own stream, not a copy of the main one's
            decorrelate(self.policy, self.settings.seed)
        main = distributed.is_main()
        if main:
            if self.resume:
                warn_if_schedule_changed(self.out_dir, self.settings, self.start)
            write_run_settings(self.out_dir, self.game, algorithm.name, self.settings)
        self.log = MetricsLog(self.out_dir, resume_from=self.start if self.resume else None, files=main)
        self.history = list(self.log.rows)
        self.began = time.perf_counter()
        # with a token budget the bar counts sampled tokens (the number of iterations is not known)
        budget = self.settings.token_budget
        self.spent = sum(row.get("action_tokens", 0) for row in self.history)
        self.bar = run_progress_bar(algorithm.name, self.game, token_budget=budget, steps=self.settings.iterations,
                                    done_steps=self.start, history=self.history, progress=self.progress and main)
        self.over_budget = budget is not None and self.spent >= budget  # a resumed part after the budget ran out
        if self.validation is not None and not self.validation.scores:
            # the start (or, for a run begun without validation, the weights it resumes with) is a candidate too
            score = self.validation.consider(self.start, self.policy, algorithm.modules())
            self.bar.set_postfix(val=f"{score:.2f}", refresh=False)

    def iterations(self):
        """The iterations this part of the run trains, stopping once the token budget is spent;
        closes the log and the bar when the loop ends (or fails)."""
        try:
            for iteration in range(self.start, self.stop if not self.over_budget else self.start):
                self.iteration, self.iteration_began = iteration, time.perf_counter()
                yield iteration
                if self.over_budget:
                    break
        finally:
            self.bar.close()
            self.log.close()

    def collect(self) -> Rollout:
        """This iteration's turns, played by the current policy from the next training seeds (this
        process's share of them, when several processes run; :attr:`whole_rollout` is everyone's)."""
        settings = self.settings
        n, rank = distributed.num_processes(), distributed.process_index()
        turns = distributed.share(settings.turns_per_iteration)
        if turns < 1:
            raise ValueError(f"turns_per_iteration ({settings.turns_per_iteration}) must be at least the number "
                             f"of processes ({n})")
        # process r plays seeds next_seed + r, + r + n, + r + 2n...: disjoint, and one process plays them all
        seeds = range(self.next_seed + rank, self.next_seed + n * turns + rank, n)  # >= one turn per episode
        if settings.train_seeds is not None:  # a fixed training split, cycled through
            seeds = [settings.first_seed + (s - settings.first_seed) % settings.train_seeds for s in seeds]
        rollout = collect(self.policy, self.game, seeds, env_options=settings.env_options,
                          num_envs=settings.num_envs, turn_budget=turns, sampling=settings.sampling,
                          temperature=None if settings.temperature == 1 else settings.temperature)
        self.sampled_at = time.perf_counter()
        #: the whole iteration's rollout, every process's episodes in rank order
        self.whole_rollout = whole_batch(rollout)
        self.next_seed += n * max(distributed.gather([len(rollout.records)]))  # past every process's last seed
        self.metrics = rollout_metrics(self.whole_rollout)  # what the batch was, before the update sees it
        fit_threads()
        return rollout

    def end_iteration(self, update_metrics: dict[str, float], algorithm: Algorithm) -> dict[str, float]:
        """Log the collected batch's and the update's metrics; checkpoint when it is time (the
        algorithm's optimiser, modules and state with the weights). Returns the metrics."""
        settings, iteration = self.settings, self.iteration
        metrics = {**self.metrics, **update_metrics}
        metrics["sample_seconds"] = self.sampled_at - self.iteration_began
        metrics["train_seconds"] = time.perf_counter() - self.sampled_at
        budget = settings.token_budget
        self.spent += metrics["action_tokens"]
        over_budget = budget is not None and self.spent >= budget
        postfix = {"ret": f"{metrics['mean_return']:.2f}", "success": f"{metrics['success_rate']:.2f}"}
        if self.validation is not None and self.validation.due(iteration + 1, last=iteration + 1 == settings.iterations or over_budget):
            began = time.perf_counter()
            score = self.validation.consider(iteration + 1, self.policy, algorithm.modules())
            metrics[f"validation_{settings.validation_metric}"] = score
            metrics["validation_seconds"] = time.perf_counter() - began
            postfix["val"] = f"{score:.2f}"
        if distributed.launched():  # the iteration's seconds in collective calls (chapter 10's benchmark)
            metrics.update(distributed.take_sync_seconds())
        self.log.write(iteration + 1, metrics)
        self.history.append({"step": iteration + 1, **metrics})
        # refresh=False: a postfix must not redraw the bar (in the book every redraw is a line)
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(min(metrics["action_tokens"], budget - self.bar.n) if budget is not None else 1)
        self.over_budget = over_budget
        if (iteration + 1) % settings.save_every == 0 or iteration + 1 in (self.stop, settings.iterations) or self.over_budget:
            saved = {"next_seed": self.next_seed, "algorithm": algorithm.state_dict()}
            if self.validation is not None:  # the scores so far and the best weights: one whole checkpoint
                saved["validation"] = self.validation.state_dict()
            if distributed.launched():  # every process's generators: a resumed run samples what this one would have
                saved["process_rng"] = distributed.gather([rng_state()])
            if distributed.is_main():
                save_checkpoint(self.out_dir / "checkpoint", self.policy.model, algorithm.optimizer, step=iteration + 1,
                                state=saved, modules=algorithm.modules())
            distributed.wait_for_everyone()  # no process runs ahead of a checkpoint it may resume from
        return metrics

    def finish(self, algorithm: Algorithm) -> RLResult:
        """The run's result; the final model (the algorithm's modules beside it) once the last part has run."""
        self.policy.model.eval()
        seconds = time.perf_counter() - self.began
        if self.part < self.parts and not self.over_budget:  # a part: the next part resumes from its checkpoint
            return RLResult(self.out_dir, self.history, seconds, algorithm, finished=False)
        chosen = None
        if self.validation is not None:
            self.validation.restore_best(self.policy, algorithm.modules())
            chosen = self.validation.summary()
            if distributed.is_main():
                durable.write_text(self.out_dir / "validation.json", json.dumps(chosen, indent=1))
        save_final_model(self.policy, self.out_dir, algorithm.modules())
        return RLResult(self.out_dir, self.history, seconds, algorithm, validation=chosen)


def train(
    algorithm: type[Algorithm] | Algorithm,
    policy,
    game: str,
    settings: RLSettings | None = None,
    *,
    out_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    stage: tuple[int, int] = (1, 1),
) -> RLResult:
    """Train ``policy`` in place on ``game`` with ``algorithm``: a class
    (:class:`~tutorial_lib.rl.reinforce.Reinforce`, :class:`~tutorial_lib.rl.ppo.PPO`), built here
    with ``settings`` (default: its settings class's defaults) once the run has seeded torch, so
    that a fresh value head is the same for a seed; or one already built on ``policy`` (it brings
    its settings). Logs, checkpoints and the final model (the algorithm's modules, a value head,
    beside it) go to ``out_dir``; ``result.algorithm`` is the algorithm. ``resume=True`` continues a
    stopped run exactly; ``stage=(i, n)`` runs the i-th of n parts (:class:`Run`)."""
    if isinstance(algorithm, type):
        settings = settings or algorithm.settings_class()
    elif algorithm.policy is not policy or settings not in (None, algorithm.settings):
        raise ValueError("an algorithm passed built trains its own policy with its own settings")
    else:
        settings = algorithm.settings
    run = Run(policy, game, settings, out_dir=out_dir, resume=resume, progress=progress, stage=stage)
    if isinstance(algorithm, type):
        algorithm = algorithm(policy, settings)  # after Run has seeded torch
    run.restore(algorithm)
    for _ in run.iterations():
        rollout = run.collect()  # turns_per_iteration turns from fresh seeds, sampled by the current policy
        metrics = algorithm.update(rollout)  # advantages, then the optimiser's steps
        run.end_iteration(metrics, algorithm)
    return run.finish(algorithm)
