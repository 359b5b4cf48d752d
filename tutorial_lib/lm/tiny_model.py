"""The tiny offline policy: a small Llama-style model and a BPE tokenizer trained on the games' own
text (chapter 2). It is what every chapter runs at the ``ci`` preset.

Nothing is downloaded. The tokenizer's training text is made by playing the four games (expert and
random actions) and rendering the prompts the book uses, so the vocabulary is the games' vocabulary:
``tomato``, ``<move>``, ``\\boxed`` and ``####`` become single tokens, and a prompt of ~1,500
characters is a few hundred tokens. The model is a :class:`transformers.LlamaForCausalLM` built from
a config with random weights -- the same class and code path as a real pretrained model, so nothing
downstream needs to know which it has.

Both are built deterministically from a :class:`TinyConfig` (same config and seed, same tokenizer and
same weights) and cached on disk under ``$TUTORIAL_CACHE`` (default ``~/.cache/tutorial_lib``), keyed
by a hash of the config, so building happens once per machine.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from tutorial_lib import envs
from tutorial_lib.lm.prompts import Turn, build_prompt_text
from tutorial_lib.runtime import durable
from tutorial_lib.runtime.cache import cache_root
from tutorial_lib.runtime.progress import quiet_transformers

#: bump when the corpus or the tokenizer recipe changes, so old caches are not reused
RECIPE_VERSION = 3

SPECIAL_TOKENS = {"pad": "<|pad|>", "eos": "<|end|>"}

#: Tic-tac-toe moves as whole tokens. Spelled as digits, ``x(1,2)`` is six tokens and choosing a
#: legal move means matching two digits against the listed moves, which the tiny model had not
#: learnt after 3,000 SFT steps (invalid-move rate ~45%). As one token per move, choosing a legal
#: move is copying one of the listed tokens, learnt in ~2,000 steps (invalid rate 3%). Pretrained
#: models spell moves as digits and have copying skills from pre-training; a model trained from
#: scratch needs the help. Chapter 4 measures it.
MOVE_TOKENS = [f"{mark}({row},{col})" for mark in "xo" for row in range(3) for col in range(3)]
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]

#: a minimal chat template: ``<|user|>\n...<|end|>\n<|assistant|>\n...<|end|>\n``
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|assistant|>\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class TinyConfig:
    """Shape of the tiny model and its tokenizer."""

    #: upper bound on the BPE vocabulary (byte alphabet and special tokens included); training stops
    #: earlier when every word of the corpus is a single token (about 1,200 with the defaults)
    vocab_size: int = 2048
    # Small on purpose: on a 2-core CPU a model this size takes ~20 optimiser steps a second, and
    # steps, not width, were what the games' SFT needed (chapter 4).
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 256
    #: longest sequence the model accepts (prompt + completion)
    max_positions: int = 2048
    #: episodes per game played to make the tokenizer's training text
    corpus_episodes: int = 60
    #: seeds the corpus and the weights
    seed: int = 0

    def key(self) -> str:
        blob = json.dumps({**asdict(self), "recipe": RECIPE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


# -- the tokenizer's training text ----------------------------------------------------------------
_CORPUS_GAMES: dict[str, dict] = {
    "tictactoe": dict(agent_mark="alternate"),
    "cookingworld": {},
    "guess_the_number": dict(preset="hard"),
    "math": {},
}


def game_corpus(episodes: int, seed: int = 0) -> list[str]:
    """Prompts and actions from ``episodes`` episodes of each game, half expert and half random play."""
    rng = random.Random(seed)
    texts: list[str] = []
    for game, options in _CORPUS_GAMES.items():
        env = envs.make(game, **options)
        try:
            for episode in range(episodes):
                expert = episode % 2 == 0
                observation, info = env.reset(seed=seed * 100_000 + episode)
                turns = [Turn(observation, info=info)]
                while not env.done:
                    texts.append(build_prompt_text(game, env.task, turns))
                    action = env.expert_action() if expert else env.random_action(rng)
                    texts.append(action)
                    turns[-1].action = action
                    observation, _, _, _, info = env.step(action)
                    turns.append(Turn(observation, info=info))
                texts.append(observation)
        finally:
            env.close()
    return texts


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE tokenizer (GPT-2's scheme) trained on ``texts``, with our chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = [SPECIAL_TOKENS["pad"], SPECIAL_TOKENS["eos"], *ROLE_TOKENS]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any byte stays encodable
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=SPECIAL_TOKENS["pad"],
        eos_token=SPECIAL_TOKENS["eos"],
        additional_special_tokens=ROLE_TOKENS,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.add_tokens(MOVE_TOKENS)  # ordinary (not special) tokens: they decode as text
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(tokenizer, config: TinyConfig):
    """A randomly initialised Llama-style causal LM sized by ``config``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=True,  # a quarter of the parameters at this size; costs nothing
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(config.seed)
    model = LlamaForCausalLM(model_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def tiny_model_dir(config: TinyConfig = TinyConfig(), *, rebuild: bool = False) -> Path:
    """The cache folder holding the tiny model and tokenizer for ``config``, built if missing (or
    ``rebuild``). Written whole: a build killed half-way is built again, never loaded."""
    target = cache_root() / f"tiny-{config.key()}"

    def build(staging: Path) -> None:
        tokenizer = train_tokenizer(game_corpus(config.corpus_episodes, config.seed), config.vocab_size)
        model = build_model(tokenizer, config)
        with quiet_transformers():
            model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "tiny_config.json").write_text(json.dumps(asdict(config), indent=2))

    if not rebuild:
        return durable.build_once(target, build)
    with durable.building(target) as staging:
        build(staging)
    return target
