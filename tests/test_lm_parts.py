"""The body / output-layer split every scorer uses: it must give the logits of the model's own
forward, soft-capping included, with and without a LoRA wrapper (chapters 4-8)."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM

from tutorial_lib.data.sft import completion_logits
from tutorial_lib.lm.lm_parts import body_hidden_states, hidden_size, output_logits, unwrap_peft
from tutorial_lib.lm.tokenization import IGNORE_INDEX
from tutorial_lib.rl.rollout import action_logprobs, collate_turns

SIZES = dict(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=2, head_dim=8)


def gemma2():
    torch.manual_seed(0)
    config = Gemma2Config(**SIZES, final_logit_softcapping=0.5, attn_logit_softcapping=None,
                          attn_implementation="eager")
    return Gemma2ForCausalLM(config).eval()


def llama_with_lora():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SIZES)).eval()
    wrapped = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    return wrapped.eval()


@pytest.mark.parametrize("make", [gemma2, llama_with_lora])
def test_body_then_output_layer_gives_the_models_own_logits(make):
    model = make()
    ids = torch.randint(0, 50, (2, 7))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}  # extra keys are ignored
    with torch.no_grad():
        ours = output_logits(model, body_hidden_states(model, inputs))
        theirs = model(input_ids=ids).logits.float()
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert hidden_size(model) == 16 and unwrap_peft(model).config.hidden_size == 16


def test_the_cap_is_applied_and_sft_and_rollout_scoring_both_use_it():
    model = gemma2()
    ids = torch.randint(0, 50, (1, 6))
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
        assert logits.abs().max() <= 0.5  # the cap is what keeps them this small
        labels = torch.full_like(ids, IGNORE_INDEX)
        labels[0, 4:] = ids[0, 4:]  # the last two tokens are the completion
        sft_logits, targets = completion_logits(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                                        "labels": labels})
        torch.testing.assert_close(sft_logits, logits[0, 3:5], atol=1e-5, rtol=1e-5)
        assert targets.tolist() == ids[0, 4:].tolist()
        turn = type("Turn", (), {"prompt_ids": ids[0, :4].tolist(), "action_ids": ids[0, 4:].tolist(),
                                 "logprobs": [0.0, 0.0]})()
        scored = action_logprobs(model, collate_turns([turn], pad_token_id=0)).logprobs
    expected = logits[0, 3:5].log_softmax(-1).gather(-1, ids[0, 4:, None]).squeeze(-1)
    torch.testing.assert_close(scored[0], expected, atol=1e-5, rtol=1e-5)
