"""Reinforcement learning on text games (chapters 5-7, 10).

The loop and the algorithms: ``rl_loop`` (``train``, the one collect-then-update loop, its ``Run``
and the ``Algorithm`` contract), ``reinforce`` (chapter 5), ``ppo`` (PPO with a value head,
chapter 6), ``grpo`` (GRPO through TRL's ``GRPOTrainer``, chapter 7), ``tictactoe_moves`` (single
tic-tac-toe moves scored by a solver, for GRPO). What they are built from: ``rollout`` (batched
collection, ``TurnBatch``, scoring actions), ``packed_games`` (a game's turns scored in one
forward pass), ``advantages`` (discounted returns, ReBN, GAE, group
normalisation), ``settings`` (``RLSettings``), ``whole_batch`` (statistics over every process's
turns), ``update_step`` (precision, micro-batches, the optimiser step), ``kl`` (KL estimators and
the reference), ``schedules`` (learning rates), ``validation`` (a run's model chosen on held-out
greedy games). May import ``runtime``, ``envs``, ``lm`` and ``evaluation``; nothing of ``data``.
"""
