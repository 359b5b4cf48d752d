"""Statistics over the whole batch when several processes share it (chapter 10).

Under ``accelerate launch`` each process holds its own share of an iteration's turns, but ReBN's
means, the advantage whitening, the per-token means of the losses and the logged metrics must be
the whole batch's, never one process's. This module is what an update asks for that: every
process's episodes (:func:`whole_batch`) and values (:func:`gathered`), where this process's rows
lie in them (:func:`own_rows`), whitening over all of them (:func:`whiten_whole_batch`), global
token counts and metric sums (:func:`global_token_count`, :func:`global_sums`), and one shuffled
minibatch order (:func:`shared_minibatches`). In one process each is the plain computation, so
the algorithms (:mod:`~tutorial_lib.rl.reinforce`, :mod:`~tutorial_lib.rl.ppo`) call these and
never :mod:`tutorial_lib.runtime.distributed` itself. Imports ``runtime`` and ``rl``'s
``rollout`` and ``advantages``.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from tutorial_lib.rl.advantages import whiten
from tutorial_lib.rl.rollout import Rollout, TurnBatch
from tutorial_lib.runtime import distributed


def whole_batch(rollout: Rollout) -> Rollout:
    """Every process's episodes of this iteration, in rank order (one process: ``rollout`` itself):
    what a statistic over the batch is taken over. Gathered once per rollout: the loop's metrics and
    the algorithm's advantages ask for it, and every process asks the same number of times."""
    if not distributed.launched():
        return rollout
    if rollout.everyone is None:
        records = distributed.gather([rollout.records])
        rollout.everyone = Rollout([r for part in records for r in part], max(distributed.gather([rollout.seconds])))
    return rollout.everyone


def own_rows(count: int) -> slice:
    """Where this process's ``count`` turns lie among every process's, in rank order (one process:
    all of them)."""
    first, _ = distributed.offsets(count)
    return slice(first, first + count)


def gathered(values: torch.Tensor) -> torch.Tensor:
    """Every process's 1-D ``values`` (one per turn), concatenated in rank order; ``values`` itself
    in one process. Exchanged as Python lists: for a few values per turn, not for large tensors."""
    return distributed.gather_values(values)[0]


def whiten_whole_batch(values: torch.Tensor, *, shift_mean: bool = True) -> torch.Tensor:
    """This process's ``values`` (one per turn) whitened with the whole batch's mean and standard
    deviation (:func:`~tutorial_lib.rl.advantages.whiten`); unchanged when the whole batch holds one
    value (nothing to scale by)."""
    everyone, mine = distributed.gather_values(values)
    if len(everyone) <= 1:
        return values
    return whiten(everyone, shift_mean=shift_mean)[mine]


def global_token_count(batch: TurnBatch) -> int:
    """The action tokens of every process's part of ``batch``: what a per-token mean divides by."""
    return int(distributed.sum_over_processes(batch.action_tokens))


def global_sums(sums: dict[str, float]) -> dict[str, float]:
    """Each of this process's sums added over every process (one all-reduce, in float64); ``sums``
    itself in one process."""
    return distributed.sum_metrics(sums)


def shared_minibatches(batch: TurnBatch, minibatch_turns: int) -> Iterator[tuple[TurnBatch | None, int, int]]:
    """One epoch of shuffled minibatches of the whole batch: ``(this process's turns of it or None,
    its action tokens over all processes, its turns over all processes)``.

    The order is drawn from the global generator (checkpointed with the run) by the main process
    and shared, so a minibatch is the same turns it would be in one process; each process computes
    the part it holds.
    """
    turn_tokens, own = distributed.gather_values(batch.action_mask.sum(1))  # every turn's tokens
    order = distributed.broadcast(torch.randperm(len(turn_tokens)))
    for rows in order.split(minibatch_turns):
        mine = rows[(rows >= own.start) & (rows < own.stop)] - own.start  # one process: all rows
        yield (batch.select(mine) if len(mine) else None), int(turn_tokens[rows].sum()), len(rows)
