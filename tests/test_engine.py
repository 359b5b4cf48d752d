"""The rollout engine: the compacting decode loop, LoRA merged for sampling, the engine choice."""

import copy

import pytest
import torch

from tutorial_lib.lm.engine import TINY_PARAMETERS, SamplingWeights, bucketed, decode, pick_engine
from tutorial_lib.lm.models import lora_config
from tutorial_lib.lm.policies import LanguagePolicy
from tutorial_lib.lm.sampling import SAMPLING, TokenSampler
from tutorial_lib.lm.tokenization import pad_prompt_ids
from tutorial_lib.rl.rollout import action_logprobs, collate_turns

#: one shared start (longer than MIN_SHARED_PREFIX tokens), then different endings and lengths
SHARED = "You are playing a game. Read the state, then answer with one action in the expected format. "
PROMPTS = [SHARED + ending for ending in ("Board:", "Turn 1 of 4. Make your first guess.", "Now:",
                                          "Your guess 5 is too low: the number is higher. Turn 2 of 4.")] * 3


@pytest.fixture(scope="module")
def ending_model(sharp_model, tiny_policy):
    """``sharp_model`` whose greedy rows end at different steps: the end of sequence wins once a row
    holds a multiple of 5 tokens (set on the model's whole forward, which both engines call)."""
    model = copy.deepcopy(sharp_model)
    eos = tiny_policy.tokenizer.eos_token_id

    def force_eos(module, args, kwargs, output):
        mask = kwargs["attention_mask"]  # (rows, columns), or (rows, 1, queries, keys) under a static cache
        if mask.dim() == 4:
            mask = mask[:, 0, -1, :] if mask.dtype == torch.bool else mask[:, 0, -1, :] == 0
        ends = (mask.sum(1, keepdim=True) % 5 == 0).expand(-1, output.logits.shape[1])  # real tokens so far
        output.logits[..., eos] = torch.where(ends, 1e4, output.logits[..., eos])
        return output

    model.register_forward_hook(force_eos, with_kwargs=True)
    return model


@pytest.fixture
def lora_model(tiny_policy):
    """The tiny model under LoRA adapters whose B matrices are not zero (a trained adapter)."""
    from peft import get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(copy.deepcopy(tiny_policy.model), lora_config(True))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    return model


def device_of(model) -> torch.device:
    """Where ``model`` lives: the tests' tiny model is on the card where there is one (``load_policy``)."""
    return next(model.parameters()).device


def board_ids(tokenizer, model) -> torch.Tensor:
    """One tic-tac-toe prompt's token ids as a batch of one, where ``model`` lives."""
    ids = tokenizer("Board: x(1,1) o(2,2) Your move", add_special_tokens=False)["input_ids"]
    return torch.tensor([ids], device=device_of(model))


def recompute(model, samples, pad_token_id):
    with torch.no_grad():
        return action_logprobs(model, collate_turns(samples, pad_token_id)).logprobs


def test_compact_engine_samples_what_generate_samples_greedily(tiny_policy, ending_model):
    tokenizer = tiny_policy.tokenizer
    plain = LanguagePolicy(ending_model, tokenizer, engine="generate").sample(PROMPTS, max_new_tokens=12)
    compact = LanguagePolicy(ending_model, tokenizer, engine="compact").sample(PROMPTS, max_new_tokens=12)
    assert [s.action_ids for s in compact] == [s.action_ids for s in plain]
    assert len({len(s.action_ids) for s in compact}) > 1, "the rows should end at different steps"
    for a, b in zip(compact, plain):
        # float32 through two decode loops of other batch shapes, logits x10 (up to ~10, ulp 1e-6): a few
        # ulps (seen: 7e-7); 1e-4, the bound of sampler vs trainer below, still tells apart log-probs of
        # this peaked model (std > 0.5)
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_compact_engine_logprobs_are_the_trainers(tiny_policy, sharp_model):
    policy = LanguagePolicy(sharp_model, tiny_policy.tokenizer, engine="compact", sampling="rl", seed=0)
    samples = policy.sample(PROMPTS, max_new_tokens=12)
    scores = recompute(sharp_model, samples, tiny_policy.tokenizer.pad_token_id)
    for row, sample in enumerate(samples):
        assert len(sample.logprobs) == len(sample.action_ids)
        if sample.action_ids:
            trainer = scores[row, -len(sample.action_ids):].tolist()
            assert sample.logprobs == pytest.approx(trainer, abs=1e-4)


def test_finished_rows_leave_the_batch(tiny_policy, ending_model):
    """Each decode step runs only the rows still writing: the batch shrinks as rows end."""
    tokenizer = tiny_policy.tokenizer
    rows = tokenizer(PROMPTS, add_special_tokens=False)["input_ids"]
    batch = {key: value.to(device_of(ending_model)) for key, value in pad_prompt_ids(rows, tokenizer.pad_token_id).items()}
    widths = []
    hook = ending_model.model.register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    try:
        tokens, logprobs = decode(ending_model, batch, TokenSampler(SAMPLING["greedy"]), max_new_tokens=12,
                                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    finally:
        hook.remove()
    ended = (tokens == tokenizer.eos_token_id).any(1)
    assert widths[0] == len(PROMPTS)  # the prompts' pass
    assert widths[1:] == sorted(widths[1:], reverse=True) and widths[-1] < len(PROMPTS)
    assert sum(widths[1:]) < (len(widths) - 1) * len(PROMPTS), "no step should run finished rows"
    # a row's tokens after its end are pads with log-probability 0
    for row in torch.nonzero(ended).squeeze(1).tolist():
        end = int((tokens[row] == tokenizer.eos_token_id).nonzero()[0])
        assert (logprobs[row, end + 1:] == 0).all()


def test_lora_is_sampled_through_a_merged_copy_that_follows_training(tiny_policy, lora_model):
    weights = SamplingWeights(lora_model)
    assert weights.mergeable
    base_before = {n: p.detach().clone() for n, p in lora_model.named_parameters() if not p.requires_grad}
    ids = board_ids(tiny_policy.tokenizer, lora_model)
    merged = weights.model()
    assert not any(name for name, _ in merged.named_modules() if "lora" in name)  # plain layers, no adapters
    with torch.no_grad():  # float32, W + BA vs xW + xAB: rounding of 32-term dot products, ~1e-7 (seen)
        assert torch.allclose(merged(ids).logits, lora_model(ids).logits, atol=1e-5)
    assert weights.model() is merged and weights.merges == 1  # unchanged adapters: nothing rewritten

    optimizer = torch.optim.SGD([p for p in lora_model.parameters() if p.requires_grad], lr=0.5)
    for _ in range(3):  # training moves the adapters; each time the copy follows
        lora_model(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            assert torch.allclose(weights.model()(ids).logits, lora_model(ids).logits, atol=1e-5)
    assert weights.merges == 4
    for name, parameter in lora_model.named_parameters():  # merging never touched the trainer's base
        if name in base_before:
            assert torch.equal(parameter, base_before[name]), name


def test_a_lora_policy_samples_log_probs_of_the_adapted_model(tiny_policy, lora_model):
    policy = LanguagePolicy(lora_model, tiny_policy.tokenizer, engine="compact", sampling="rl", seed=1)
    samples = policy.sample(PROMPTS[:4], max_new_tokens=8)
    scores = recompute(lora_model, samples, tiny_policy.tokenizer.pad_token_id)
    for row, sample in enumerate(samples):
        assert sample.logprobs == pytest.approx(scores[row, -len(sample.action_ids):].tolist(), abs=1e-4)


def test_models_that_cannot_be_merged_sample_through_themselves(tiny_policy, lora_model):
    assert SamplingWeights(tiny_policy.model).model() is tiny_policy.model  # no adapters: itself
    for name, parameter in lora_model.named_parameters():  # a trainable tensor outside the adapters
        if "embed_tokens" in name:
            parameter.requires_grad_(True)
    assert SamplingWeights(lora_model).model() is lora_model


def test_engine_choice(tiny_policy):
    assert tiny_policy.model.num_parameters() < TINY_PARAMETERS
    # the engine follows where the model lives unless a kind is named
    assert pick_engine(tiny_policy.model) == pick_engine(tiny_policy.model, device_of(tiny_policy.model).type)
    assert pick_engine(tiny_policy.model, "cpu") == "generate"  # the book's records were sampled by generate
    assert pick_engine(tiny_policy.model, "cuda") == "static"
    with pytest.raises(ValueError, match="unknown engine"):
        LanguagePolicy(tiny_policy.model, tiny_policy.tokenizer, engine="vllm")


def test_static_shapes_come_in_buckets(tiny_policy):
    """The static engine's batches grow to a bucket of rows and columns: real rows first, added
    rows ordinary prompts, added columns masked padding on the left."""
    tokenizer = tiny_policy.tokenizer
    batch = pad_prompt_ids(tokenizer(PROMPTS[:5], add_special_tokens=False)["input_ids"], tokenizer.pad_token_id)
    grown, rows = bucketed(batch, tokenizer.pad_token_id)
    assert rows == 5 and grown["input_ids"].shape == (8, 64) and batch["input_ids"].shape[1] < 64
    width = batch["input_ids"].shape[1]
    assert torch.equal(grown["input_ids"][:5, -width:], batch["input_ids"])
    assert torch.equal(grown["attention_mask"][:5].sum(1), batch["attention_mask"].sum(1))
    assert torch.equal(grown["input_ids"][5:], grown["input_ids"][:1].expand(3, -1))
    assert bucketed(pad_prompt_ids([[1, 2]] * 1500, 0), 0)[0]["input_ids"].shape[0] == 2048


def test_static_engine_samples_what_generate_samples(tiny_policy, ending_model):
    """The static cache and bucketed shapes change no token (on a CPU nothing is compiled)."""
    tokenizer = tiny_policy.tokenizer
    plain = LanguagePolicy(ending_model, tokenizer, engine="generate").sample(PROMPTS[:5], max_new_tokens=12)
    static = LanguagePolicy(ending_model, tokenizer, engine="static").sample(PROMPTS[:5], max_new_tokens=12)
    assert [s.action_ids for s in static] == [s.action_ids for s in plain]
    for a, b in zip(static, plain):
        # float32, other cache and batch shapes, logits x10: a few ulps of ~10 (seen: 7e-7)
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the static engine compiles its decode step for CUDA; no CUDA here")
def test_static_engine_logprobs_are_the_trainers_on_cuda(tiny_policy, sharp_model):
    model = copy.deepcopy(sharp_model).cuda()
    policy = LanguagePolicy(model, tiny_policy.tokenizer, engine="static", sampling="rl", seed=0)
    samples = policy.sample(PROMPTS, max_new_tokens=12)
    scores = recompute(model, samples, tiny_policy.tokenizer.pad_token_id).cpu()
    for row, sample in enumerate(samples):
        if sample.action_ids:
            assert sample.logprobs == pytest.approx(scores[row, -len(sample.action_ids):].tolist(), abs=1e-3)


def test_a_kl_reference_of_a_lora_model_is_a_merged_frozen_copy_of_its_start(tiny_policy, lora_model):
    from tutorial_lib.rl.kl import frozen_reference
    from tutorial_lib.rl.reinforce import ReinforceSettings

    ids = board_ids(tiny_policy.tokenizer, lora_model)
    with torch.no_grad():
        start = lora_model(ids).logits
    reference = frozen_reference(ReinforceSettings(kl_coef=0.1), lora_model)
    assert not any("lora" in name for name, _ in reference.named_modules())  # plain layers: no adapter products
    assert not any(p.requires_grad for p in reference.parameters())
    optimizer = torch.optim.SGD([p for p in lora_model.parameters() if p.requires_grad], lr=0.5)
    lora_model(ids, labels=ids).loss.backward()
    optimizer.step()
    with torch.no_grad():  # the policy moved; the reference is still its start (float32 merge rounding, as above)
        assert not torch.allclose(lora_model(ids).logits, start, atol=1e-3)
        assert torch.allclose(reference(ids).logits, start, atol=1e-5)
    plain = frozen_reference(ReinforceSettings(kl_coef=0.1), tiny_policy.model)  # no adapters: a frozen deep copy
    assert plain is not tiny_policy.model and not any(p.requires_grad for p in plain.parameters())
