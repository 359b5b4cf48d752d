import math

import pytest
import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from tutorial_lib.lm.sampling import SAMPLING, TokenSampler


def draw(sampler, scores, times):
    """``times`` draws from ``scores`` (one row repeated), as token ids."""
    out = sampler(torch.zeros(times, 1, dtype=torch.long), scores.expand(times, -1).clone())
    assert torch.isfinite(out).sum(dim=1).eq(1).all()  # exactly one finite score per row
    return out.argmax(dim=1)


def test_draws_follow_the_distribution_and_never_pick_a_zero_probability_token():
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0, 0.0])
    tokens = draw(TokenSampler(SAMPLING["rl"]), probs.log()[None], 40_000)
    counts = torch.bincount(tokens, minlength=6).double()
    assert counts[4:].sum() == 0
    expected = 40_000 * probs.double()
    # chi-square with 3 degrees of freedom: 16.3 is its 0.999 quantile
    chi2 = ((counts[:4] - expected[:4]) ** 2 / expected[:4]).sum().item()
    assert chi2 < 16.3, (counts, expected)


def test_warpers_are_generates_own_and_the_logprob_is_the_warped_distributions():
    torch.manual_seed(1)
    scores = torch.randn(64, 100)
    sampler = TokenSampler(SAMPLING["standard"])  # temperature .7, top-k 50, top-p .95
    chosen = sampler(torch.zeros(64, 1, dtype=torch.long), scores.clone()).argmax(dim=1)
    warped = scores.clone()
    for warper in (TemperatureLogitsWarper(0.7), TopKLogitsWarper(50), TopPLogitsWarper(0.95)):
        warped = warper(None, warped)
    expected = warped.log_softmax(-1).gather(1, chosen[:, None])[:, 0]
    assert torch.isfinite(warped.gather(1, chosen[:, None])).all()  # never a token the warpers cut
    # the same warpers and float32 log_softmax on the same scores: the same computation (seen: equal)
    torch.testing.assert_close(sampler.logprobs(1)[:, 0], expected)


def test_greedy_takes_the_argmax_and_keeps_its_logprob():
    scores = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])
    sampler = TokenSampler(SAMPLING["greedy"])
    assert draw(sampler, scores[:1], 1).tolist() == [1]
    sampler(None, scores[1:].clone())
    logprobs = sampler.logprobs(2)
    assert logprobs.shape == (1, 2)
    # float32 log_softmax vs float64 maths: a few ulps of the terms (~2, ulp 2.4e-7), not of the result
    # (0.41); the default rel=1e-6 allowed 4e-7, under 2 ulps (seen: 7e-8)
    assert logprobs[0, 0].item() == pytest.approx(2.0 - math.log(1 + math.e**2 + math.e), abs=2e-6)


def test_bad_settings_and_steps_are_clear_errors():
    with pytest.raises(ValueError, match="unknown sampling settings"):
        TokenSampler({"do_sample": True, "temprature": 0.5})
    sampler = TokenSampler(SAMPLING["rl"])
    with pytest.raises(ValueError, match="asked for 1 steps"):
        sampler.logprobs(1)
