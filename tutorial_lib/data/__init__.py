"""From expert play to a fine-tuned policy (chapters 3 and 4).

Modules: ``expert_data`` (MCTS self-play, symmetries, expert transcripts), ``sft`` (supervised
fine-tuning through TRL, in resumable parts). May import ``runtime``, ``envs``, ``lm`` and
``evaluation``; nothing of ``rl``.
"""
