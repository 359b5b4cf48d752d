"""Reinforcement learning on text games (chapters 5-7).

Modules: ``rollout`` (batched collection, ``TurnBatch``, scoring actions), ``advantages``
(discounted returns, ReBN, GAE, group normalisation), ``rl_loop`` (the collect-then-update loop
REINFORCE and PPO share), ``validation`` (a run's model chosen on held-out greedy games),
``reinforce`` (chapter 5), ``ppo`` (PPO with a value head, chapter 6), ``grpo`` (GRPO through
TRL's ``GRPOTrainer``, chapter 7), ``tictactoe_moves`` (single tic-tac-toe moves scored by a solver,
for GRPO). May import ``runtime``, ``envs``, ``lm`` and ``evaluation``; nothing of ``data``.
"""
