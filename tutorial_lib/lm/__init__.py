"""The language model as a policy: loading it, the offline tiny model, prompts, tokenisation,
sampling and the policy objects that turn a game's observation into an action (chapters 2 and 9).

Modules: ``models`` (``load_policy``: tiny, offline SmolLM2 or hub, LoRA, 4-bit), ``tiny_model``
(the offline tiny model and its tokenizer), ``prompts`` (prompt templates, history windows),
``tokenization`` (prompt/completion tensors, loss masks, padding), ``sampling`` (sampling presets,
the token sampler), ``engine`` (the rollout engine: LoRA merged for sampling, finished rows dropped,
a static cache on CUDA), ``policies`` (random, expert and language-model policies), ``lm_parts`` (a
model as body + output layer, through LoRA's wrapper). May import ``runtime`` and ``envs``; nothing of
``evaluation``, ``data`` or ``rl``.
"""
