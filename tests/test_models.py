import json

import pytest
import torch

from tutorial_lib.lm import models
from tutorial_lib.lm.policies import EpisodeState, LanguagePolicy
from tutorial_lib.lm.prompts import Turn
from tutorial_lib.lm.sampling import SAMPLING
from tutorial_lib.lm.tiny_model import TinyConfig, tiny_model_dir

from .conftest import SMALL


def test_tiny_model_is_small_cached_and_has_a_chat_template(tiny_policy, tiny_cache):
    assert 10_000 < tiny_policy.num_parameters() < 5_000_000
    folder = tiny_model_dir(SMALL)
    assert folder.parent == tiny_cache and (folder / "tokenizer.json").exists()
    assert json.loads((folder / "tiny_config.json").read_text())["vocab_size"] == SMALL.vocab_size
    text = tiny_policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|user|>\nhi<|end|>\n<|assistant|>\n"
    # the games' frequent words are whole tokens, even in this small vocabulary
    assert len(tiny_policy.tokenizer(" the kitchen")["input_ids"]) == 2


def test_tiny_build_is_deterministic_for_a_seed(tiny_cache, tmp_path, monkeypatch):
    first = tiny_model_dir(SMALL)
    monkeypatch.setenv("TUTORIAL_CACHE", str(tmp_path))
    second = tiny_model_dir(SMALL)
    assert first != second
    assert (first / "tokenizer.json").read_text() == (second / "tokenizer.json").read_text()
    from safetensors.torch import load_file

    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    other_seed = TinyConfig(**{**SMALL.__dict__, "seed": 1})
    c = load_file(tiny_model_dir(other_seed) / "model.safetensors")
    assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])


def test_policy_acts_with_one_batched_generate_call(tiny_policy, monkeypatch):
    from tutorial_lib import envs

    calls = []
    original = tiny_policy.model.generate

    def counting_generate(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(tiny_policy.model, "generate", counting_generate)
    episodes = []
    for seed in range(5):
        env = envs.make("guess_the_number")
        observation, info = env.reset(seed=seed)
        episodes.append(EpisodeState("guess_the_number", env, [Turn(observation, info=info)]))
    actions = tiny_policy.act(episodes)
    assert calls == [5] and len(actions) == 5 and all(isinstance(a, str) for a in actions)


def test_sampling_presets_and_seeded_sampling(tiny_policy):
    assert SAMPLING["standard"] == dict(do_sample=True, temperature=0.7, top_k=50, top_p=0.95)
    assert SAMPLING["liberal"]["top_k"] == 2000
    prompts = ["Turn 1 of 4.", "Board:"]
    a = LanguagePolicy(tiny_policy.model, tiny_policy.tokenizer, sampling="liberal", seed=3)
    b = LanguagePolicy(tiny_policy.model, tiny_policy.tokenizer, sampling="liberal", seed=3)
    assert a.generate(prompts, max_new_tokens=6) == b.generate(prompts, max_new_tokens=6)
    with pytest.raises(ValueError, match="greedy, standard, liberal"):
        LanguagePolicy(tiny_policy.model, tiny_policy.tokenizer, sampling="hot")


def test_lora_wraps_the_model_and_trains_only_adapters(tiny_cache):
    policy = models.load_policy("tiny", tiny_config=SMALL, lora={"r": 4, "lora_alpha": 8})
    trainable, total = policy.num_parameters(trainable_only=True), policy.num_parameters()
    assert 0 < trainable < total / 5
    assert any("lora_A" in name for name, _ in policy.model.named_parameters())
    assert policy.generate(["Board:"], max_new_tokens=3)  # still generates


def test_new_lora_adapters_start_from_their_seed_whatever_the_process_drew_before(tiny_cache):
    # a benchmark that trains seed 2's SFT after seed 1's RL in one process once got another start
    # than the same command alone: the adapters' initial values came from torch's global generator
    def adapters(**seed):
        policy = models.load_policy("tiny", tiny_config=SMALL, lora={"r": 4, "lora_alpha": 8}, **seed)
        return {name: p.detach().clone() for name, p in policy.model.named_parameters() if "lora_A" in name}

    torch.manual_seed(1)
    first = adapters()
    torch.rand(1000)  # what an earlier run in this process might have drawn
    caller = torch.get_rng_state()
    again = adapters()
    assert torch.equal(torch.get_rng_state(), caller)  # the caller's stream is left as it was
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    other = adapters(lora_seed=1)
    assert not all(torch.equal(first[k], other[k]) for k in first)  # another seed, another start


def test_a_saved_folder_loads_through_the_pretrained_path(tiny_policy, tmp_path):
    tiny_policy.model.save_pretrained(tmp_path)
    tiny_policy.tokenizer.save_pretrained(tmp_path)
    loaded = models.load_policy(str(tmp_path))
    prompts = ["Turn 1 of 4. Make your first guess."]
    assert loaded.generate(prompts, max_new_tokens=5) == tiny_policy.generate(prompts, max_new_tokens=5)


def test_offline_hub_request_names_the_offline_models():
    with pytest.raises(models.ModelUnavailableError, match=r"'tiny'.*'smollm2-135m'.*TUTORIAL_SCALE=small") as error:
        models.load_policy("Qwen/Qwen2.5-0.5B-Instruct")
    assert "Hugging Face Hub may be unreachable" in str(error.value)


@pytest.mark.parametrize("name", ["/no/such/run/sft", "./runs/sft-missing", "runs/a/sft-missing"])
def test_a_missing_folder_is_named_as_missing_not_sent_to_the_hub(name):
    with pytest.raises(FileNotFoundError, match="no model folder at .*does not exist"):
        models.load_policy(name)


def test_a_hub_id_is_not_mistaken_for_a_folder():
    assert not models.looks_like_a_folder("Qwen/Qwen2.5-0.5B-Instruct")
    assert not models.looks_like_a_folder("smollm2-135m")
    assert models.looks_like_a_folder("/tmp/run/sft") and models.looks_like_a_folder("../sft")


def test_four_bit_needs_cuda_and_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the error path is for machines without it")
    with pytest.raises(RuntimeError, match="CUDA"):
        models.load_policy("Qwen/Qwen2.5-0.5B-Instruct", load_in_4bit=True, lora=True)
    with pytest.raises(ValueError, match="pretrained"):
        models.load_policy("tiny", load_in_4bit=True)


def test_lora_config_forms():
    from peft import LoraConfig

    assert models.lora_config(True).r == models.DEFAULT_LORA["r"]
    assert models.lora_config({"r": 64, "lora_alpha": 64}).lora_alpha == 64
    given = LoraConfig(r=2)
    assert models.lora_config(given) is given
    with pytest.raises(TypeError, match="lora must be"):
        models.lora_config("yes")
    with pytest.raises(ValueError, match="'tiny'"):
        models.load_policy("")


def test_a_move_to_xla_ties_the_output_layer_to_the_embedding_again(tiny_cache):
    # moving to torch_xla's device gives each module its own new parameter: simulate that split on the
    # CPU, then check the re-tie makes the two one parameter again (an update would train them apart)
    model = models.load_policy("tiny", device="cpu").model
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    assert model.lm_head.weight is not model.get_input_embeddings().weight
    models.retie_after_move(model, torch.device("cpu"))  # on the CPU a move keeps them: nothing to do
    assert model.lm_head.weight is not model.get_input_embeddings().weight
    models.retie_after_move(model, torch.device("xla"))
    assert model.lm_head.weight is model.get_input_embeddings().weight
    assert len(list(model.parameters())) == len({id(p) for p in model.parameters()})
    # and no hub kernels on XLA: model.train() would kernelize, which rejects the xla device type
    assert models.xla_load_options(torch.device("xla")) == {"use_kernels": False}
    assert models.xla_load_options(torch.device("cpu")) == {}
