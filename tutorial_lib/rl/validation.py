"""Choosing a run's model on held-out validation games (early stopping, as in supervised learning).

An RL policy does not improve monotonically: a batch of 16 games moves it by a noisy step, and the
weights of the last iteration are one draw from where the run wandered. :class:`Validation` plays
a fixed set of greedy games on seeds of their own (apart from the training seeds and from the
evaluation seeds a chapter reports on) before the first iteration and every few iterations, and
keeps a copy of the weights that scored best, the starting policy included. :class:`~tutorial_lib.rl.rl_loop.Run`
then saves those weights as the run's model: a run that only lost keeps its start, and a run that
peaked early keeps its peak. The verdict stays honest because the games that choose are not the
games that judge.

Validating changes nothing in training: the random state is put back after each validation, so
a run with it samples and updates exactly as the same run without it.
"""

from __future__ import annotations

from typing import Any

import torch

from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.evaluate import summarize
from tutorial_lib.runtime import distributed
from tutorial_lib.runtime.tracking import load_trainable_state, rng_state, set_rng_state, trainable_state


class Validation:
    """The best weights a run of ``game`` has passed through, by greedy play on the validation games
    its :class:`~tutorial_lib.rl.settings.RLSettings` name (``validate_every``, ``validation_*``).

    ``scores`` maps each validated iteration (0: the start) to its score; ``best_iteration`` is the
    one whose weights :meth:`restore_best` puts back. All of it is in :meth:`state_dict`, which the
    run's checkpoint carries, so a resumed run chooses among the same iterations as one that never
    stopped.
    """

    def __init__(self, game: str, settings):
        self.game, self.settings = game, settings
        self.env_options = settings.env_options if settings.validation_env_options is None \
            else settings.validation_env_options
        self.seeds = range(settings.validation_first_seed, settings.validation_first_seed + settings.validation_episodes)
        self.scores: dict[int, float] = {}
        self.best_iteration: int | None = None
        self.best_weights: dict[str, Any] | None = None

    @property
    def best_score(self) -> float | None:
        return None if self.best_iteration is None else self.scores[self.best_iteration]

    def due(self, iteration: int, last: bool) -> bool:
        """Whether the weights after ``iteration`` iterations are validated: every ``validate_every``, and the last."""
        return iteration not in self.scores and (last or iteration % self.settings.validate_every == 0)

    def score(self, policy) -> float:
        """The policy's greedy ``validation_metric`` on the validation games, the same on every process
        (the main one plays; the others wait for its score). The random state is kept as it was."""
        value = torch.zeros(1)
        if distributed.is_main():
            saved = rng_state()
            sampling = getattr(policy, "sampling", None)
            if sampling is not None:
                policy.sampling = "greedy"  # the evaluation's own rule: the policy's most likely action
            try:
                records = run_episodes(self.game, policy, self.seeds, env_options=self.env_options,
                                       batch_size=len(self.seeds))
            finally:
                if sampling is not None:
                    policy.sampling = sampling
                set_rng_state(saved)
            summary = summarize(records)
            metric = self.settings.validation_metric
            if metric not in summary:
                raise ValueError(f"validation_metric {metric!r} is not a metric of {self.game}; "
                                 f"choose one of {', '.join(sorted(summary))}")
            value[0] = summary[metric]
        # float32 on the wire (any device takes it): rounded back to the rate it was
        return round(float(distributed.broadcast(value)[0]), 6)

    def consider(self, iteration: int, policy, modules: dict[str, torch.nn.Module]) -> float:
        """Validate the weights after ``iteration`` iterations; keep a copy if they are the best so
        far (a tie keeps the earlier, nearer the start). Returns the score."""
        value = self.score(policy)
        self.scores[iteration] = value
        if self.best_iteration is None or value > self.scores[self.best_iteration]:
            self.best_iteration = iteration
            self.best_weights = {"policy": _copy_state(policy.model),
                                 "modules": {name: _copy_state(module) for name, module in modules.items()}}
        return value

    def restore_best(self, policy, modules: dict[str, torch.nn.Module]) -> None:
        """Put the best weights back into ``policy`` (and the algorithm's ``modules``)."""
        if self.best_weights is None:
            return
        load_trainable_state(policy.model, self.best_weights["policy"])
        for name, module in modules.items():
            load_trainable_state(module, self.best_weights["modules"][name])

    def summary(self) -> dict[str, Any]:
        """What ``validation.json`` and the run's result say: the metric, the scores, the choice."""
        return {"metric": self.settings.validation_metric, "episodes": len(self.seeds), "first_seed": self.seeds.start,
                "scores": {str(k): v for k, v in sorted(self.scores.items())},
                "best_iteration": self.best_iteration, "best_score": self.best_score}

    def state_dict(self) -> dict[str, Any]:
        return {"scores": dict(self.scores), "best_iteration": self.best_iteration, "best_weights": self.best_weights}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scores = {int(k): float(v) for k, v in state.get("scores", {}).items()}
        self.best_iteration = state.get("best_iteration")
        self.best_weights = state.get("best_weights")


def _copy_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    # on the CPU: a copy on an accelerator would hold its memory for the whole run
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in trainable_state(module).items()}
