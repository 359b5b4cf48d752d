"""Test-wide settings: offline, CPU, and a private cache so tests never touch the user's."""

import os
import shutil
from pathlib import Path

# Set before transformers / huggingface_hub are imported: no test may reach the Hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist (`make test` runs a worker per core) each worker computes on one thread, and so
# do the processes its tests start: a worker that spins a thread on every core slows its neighbours
# far more than it gains (benchmarks/results/threads_cpu.md). A setting the user made is kept.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("TUTORIAL_THREADS", "1")

import pytest  # noqa: E402

from tutorial_lib.lm.tiny_model import TinyConfig  # noqa: E402

#: small enough to build in a few seconds, same recipe as the book's default
SMALL = TinyConfig(vocab_size=600, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, corpus_episodes=6)


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("tutorial_cache")
    # tiny models built on another machine: their tokenizer is trained on every game's text, and a
    # machine without Java (a GPU machine here) cannot play CookingWorld to make it
    # (benchmarks/gpu_carry.sh carries them there)
    built = os.environ.get("TUTORIAL_TEST_TINY_MODELS")
    for folder in sorted(Path(built).glob("tiny-*")) if built else []:
        shutil.copytree(folder, path / folder.name)
    old = os.environ.get("TUTORIAL_CACHE")
    os.environ["TUTORIAL_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("TUTORIAL_CACHE", None)
    else:
        os.environ["TUTORIAL_CACHE"] = old


@pytest.fixture(scope="session")
def tiny_policy(tiny_cache):
    from tutorial_lib.lm.models import load_policy

    return load_policy("tiny", tiny_config=SMALL)


@pytest.fixture(scope="session")
def small_policy_dir(tiny_cache, tmp_path_factory):
    """The SMALL tiny model saved as a folder: what ``--init`` and ``--policy`` take on the command line."""
    folder = tmp_path_factory.mktemp("policy")
    from tutorial_lib.lm.models import load_policy

    policy = load_policy("tiny", tiny_config=SMALL)
    policy.model.save_pretrained(folder)
    policy.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def sharp_model(tiny_policy):
    """The tiny model with peaked next-token distributions and a likely end of sequence.

    The untrained model is nearly uniform (every log-prob ~ -log(vocab)), so a mis-aligned
    recompute could pass by accident, and it almost never stops before ``max_new_tokens``.
    Scaling its logits and favouring eos fixes both; pad is made impossible, as in a trained model.
    """
    import copy

    import torch

    model = copy.deepcopy(tiny_policy.model)
    bias = torch.zeros(model.config.vocab_size)
    bias[tiny_policy.tokenizer.eos_token_id] = 4.0
    bias[tiny_policy.tokenizer.pad_token_id] = float("-inf")
    # the bias follows the logits to their device: on a CUDA machine the tests' models live on the card
    model.lm_head.register_forward_hook(lambda module, inputs, logits: logits * 10 + bias.to(logits.device))
    return model
