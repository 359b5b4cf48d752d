"""Choosing each next token inside ``generate``, and keeping its log-probability (chapter 5).

``LanguagePolicy.sample`` hands ``generate`` a :class:`TokenSampler` as its last logits processor.
At every step the sampler applies the preset's warpers (repetition penalty, temperature, top-k,
top-p: the ``transformers`` classes, in the order ``generate`` itself applies them), chooses the
token (argmax, or a draw), remembers the chosen token's log-probability under that distribution,
and returns scores where only the chosen token is finite. ``generate`` runs in greedy mode and so
takes exactly that token.

Why not let ``generate`` sample. Two costs that grow with batch x vocabulary, measured on the
2-core CPU with the tiny model's 2,048-token vocabulary and 32 games:

* ``torch.multinomial`` draws one exponential random number per vocabulary entry and row (it
  divides the probabilities by them and takes the argmax): 1.3 ms per token for 32 x 2,048, the
  largest single item of a batched rollout turn. Inverting the cumulative distribution needs one
  uniform number per row and a binary search: 0.04 ms; the sampler's whole step (log-softmax,
  draw, log-probability kept) 0.15 ms against 1.3 ms for softmax + ``torch.multinomial``
  (chapter 5 times both). With it, 32
  tic-tac-toe games collect 9.6x the turns per second of one game at a time, against 8.0x with
  ``torch.multinomial`` (``benchmarks/results/rollout_throughput_cpu_tiny.md``).
* ``output_scores=True`` keeps a (batch, vocabulary) tensor per step, only to take one log-softmax
  per step afterwards. The sampler computes that log-softmax once, while it samples, and keeps
  one number per row.

The draw is exact: token ``i`` is chosen when ``u`` falls in ``(F(i-1), F(i)]`` of the cumulative
distribution ``F``, which happens with probability ``p(i)``; ``u`` is drawn from ``(0, F(V)]``, so a
token of probability 0 (cut by top-k or top-p) is never chosen. The cumulative sum is taken in
float64 so that rounding over a 150k-token vocabulary does not move probability between tokens.
The random stream differs from ``torch.multinomial``'s, so a seed gives other (equally
distributed) draws than ``generate``'s own sampling would.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    LogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

#: sampling presets of the GSM8K PPO tutorial, and ``rl``: plain sampling from the model, so that
#: the sampler IS the policy being trained. Every knob is set explicitly because ``generate`` falls
#: back on the checkpoint's generation config and then on library defaults for what a preset
#: leaves out: top_k=50 by default, and Qwen2.5-Instruct checkpoints ship top_k=20, top_p=0.8 and a
#: repetition penalty above 1, each of which would make the sampler differ from the policy.
SAMPLING: dict[str, dict[str, Any]] = {
    "greedy": dict(do_sample=False),
    "standard": dict(do_sample=True, temperature=0.7, top_k=50, top_p=0.95),
    "liberal": dict(do_sample=True, temperature=0.85, top_k=2000, top_p=1.0),
    "rl": dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0),
}



class TokenSampler(LogitsProcessor):
    """A logits processor that picks the next token itself (see the module docstring).

    ``preset`` is one of :data:`SAMPLING`'s dicts (``do_sample``,
    ``temperature``, ``top_k``, ``top_p``, ``repetition_penalty``); a knob left out is off. Use a
    fresh sampler per ``generate`` call: :meth:`logprobs` returns what this one chose.
    """

    def __init__(self, preset: dict[str, Any]) -> None:
        unknown = set(preset) - {"do_sample", "temperature", "top_k", "top_p", "repetition_penalty"}
        if unknown:
            raise ValueError(f"unknown sampling settings {sorted(unknown)}")
        self.do_sample = bool(preset.get("do_sample", False))
        self.warpers: list[LogitsProcessor] = []
        if self.do_sample:
            # the order of generate's own _get_logits_processor: processors, then warpers
            if (penalty := preset.get("repetition_penalty", 1.0)) != 1.0:
                self.warpers.append(RepetitionPenaltyLogitsProcessor(penalty))
            if (temperature := preset.get("temperature", 1.0)) != 1.0:
                self.warpers.append(TemperatureLogitsWarper(temperature))
            if top_k := preset.get("top_k", 0):
                self.warpers.append(TopKLogitsWarper(top_k))
            if (top_p := preset.get("top_p", 1.0)) < 1.0:
                self.warpers.append(TopPLogitsWarper(top_p))
        self._chosen: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        tokens, logprobs = self.choose(input_ids, scores)
        self._chosen.append(logprobs)
        return torch.full_like(scores, float("-inf")).scatter_(1, tokens, 0.0)

    def choose(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, 1) chosen tokens and their (batch, 1) log-probabilities, for ``scores`` (batch,
        vocab) after ``input_ids`` (what the repetition penalty reads). Records nothing: the
        rollout engine (:mod:`tutorial_lib.lm.engine`) keeps them itself, as rows leave its batch."""
        for warper in self.warpers:
            scores = warper(input_ids, scores)
        logprobs = scores.float().log_softmax(-1)
        if self.do_sample:
            cdf = logprobs.exp().double().cumsum(-1)
            total = cdf[:, -1:]
            u = (1.0 - torch.rand(total.shape, dtype=cdf.dtype, device=cdf.device)) * total  # in (0, total]
            tokens = torch.searchsorted(cdf, u).clamp_(max=scores.shape[-1] - 1)
        else:
            tokens = logprobs.argmax(-1, keepdim=True)
        return tokens, logprobs.gather(1, tokens)

    def logprobs(self, steps: int) -> torch.Tensor:
        """(batch, steps) log-probabilities of the chosen tokens, on the CPU.

        ``steps`` is the number of new tokens ``generate`` returned: it may have run (and then
        dropped) a step past its stopping point."""
        if not 1 <= steps <= len(self._chosen):
            raise ValueError(f"asked for {steps} steps; this sampler chose tokens at {len(self._chosen)}")
        return torch.cat(self._chosen[:steps], dim=1).cpu()
