"""KL divergences an RL update measures or penalises (chapters 5-6).

Holds :func:`masked_log_ratio` (``log pi - log pi_other`` on the action tokens),
:func:`sampler_kl_sums` (KL from the sampler to the policy being trained: two estimators, summed),
:func:`frozen_reference` (the starting policy a KL penalty holds the policy near) and
:func:`reference_kl` (each turn's penalty). Sums, not means: the caller divides by the whole batch's
action tokens. Imports ``lm`` and ``rl``'s ``rollout`` and ``settings``. Chapter 5 teaches the estimators,
chapter 6 the penalty.
"""

from __future__ import annotations

import copy

import torch

from tutorial_lib.lm.engine import SamplingWeights
from tutorial_lib.rl.rollout import action_logprobs
from tutorial_lib.rl.settings import RLSettings


def masked_log_ratio(logprobs: torch.Tensor, reference_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``log pi - log pi_reference`` per action token, 0 outside ``mask`` (padding compares nothing)."""
    return (logprobs - reference_logprobs).masked_fill(~mask, 0.0)


def sampler_kl_sums(log_ratio: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two estimators of KL(sampler || trainer), summed over the masked action tokens.

    ``log_ratio`` is log pi_trainer - log pi_sampler on the sampler's own tokens (Schulman,
    "Approximating KL divergence", 2020): k1 = E[-log r] is unbiased but noisy and can go negative;
    k3 = E[r - 1 - log r] is unbiased and never negative. Both ~0 when the sampler is the policy.
    Returned as 0-d tensors where they were computed: an update reads its metrics to the host once
    (:class:`~tutorial_lib.rl.update_step.MetricSums`), not once per micro-batch.
    """
    with torch.no_grad():
        k1 = torch.where(mask, -log_ratio, 0.0).sum()
        k3 = torch.where(mask, log_ratio.exp() - 1 - log_ratio, 0.0).sum()
    return k1, k3


def frozen_reference(settings: RLSettings, model) -> torch.nn.Module | None:
    """The reference a KL penalty holds the policy near: a frozen copy of ``model`` as it is now
    (the run's start: a resumed run loads its checkpoint into the policy after this copy), or
    ``None`` when ``settings.kl_coef`` is 0.

    A LoRA model's copy has its adapters merged into plain layers (the sampler's
    :class:`~tutorial_lib.lm.engine.SamplingWeights`): the reference never trains, so it need not
    carry the adapters' extra products through every forward pass."""
    if settings.kl_coef <= 0:
        return None
    merged = SamplingWeights(model)
    if merged.mergeable:
        return merged.model()  # a new frozen copy, W + BA once; the policy's own weights untouched
    return copy.deepcopy(model).eval().requires_grad_(False)


def reference_kl(reference: torch.nn.Module, inputs: dict[str, torch.Tensor], logprobs: torch.Tensor,
                 mask: torch.Tensor, temperature: float) -> torch.Tensor:
    """Per turn (a :func:`~tutorial_lib.rl.rollout.collate_turns` batch's rows), the sum over its
    action tokens of ``log pi - log pi_ref``: the k1 estimate of KL(pi || pi_ref) on the sampled
    tokens, which the penalty takes from the turn's reward. ``logprobs`` and ``mask`` are
    (turns, tokens) as :func:`~tutorial_lib.rl.rollout.action_logprobs` returns them."""
    with torch.no_grad():
        ref = action_logprobs(reference, inputs, temperature=temperature).logprobs
        return ((logprobs.to(ref.device) - ref) * mask.to(ref.device)).sum(1).float().cpu()
