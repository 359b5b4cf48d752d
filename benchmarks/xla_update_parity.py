"""One REINFORCE and one PPO update of the tiny model on torch_xla's device against the same update on
the CPU (issue "The TPU path runs"; record: ``benchmarks/results/xla_cpu_first_try.md``).

Needs an environment with torch_xla (not the project's ``.venv``)::

    PJRT_DEVICE=CPU V/bin/python benchmarks/xla_update_parity.py [--algos reinforce ppo] [--optimizers adamw sgd]

A fixed batch of 32 tic-tac-toe games is collected on the CPU by chapter 4's SFT checkpoint; the XLA policy starts from the CPU
policy's weights; each algorithm's ``update`` runs once on both, and the script prints the metrics,
whether the XLA model's output layer is still tied to its embedding, the largest weight change of the
CPU update, the largest XLA-CPU difference and the number of graph compilations. ``sgd`` replaces the
algorithm's AdamW by plain SGD at the same rate: its step is linear in the gradient, so the
difference over the change measures how far the gradients agree, which AdamW's first step (about
the rate times the gradient's sign, for every element however small) cannot show.
"""

import argparse
import time

import torch
import torch_xla
import torch_xla.debug.metrics as met

from tutorial_lib.lm.models import load_policy
from tutorial_lib.pipeline import sft_dir, sft_policy
from tutorial_lib.presets import get_preset, rl_settings
from tutorial_lib.rl.ppo import PPO
from tutorial_lib.rl.reinforce import Reinforce
from tutorial_lib.rl.rollout import collect

ALGORITHMS = {"reinforce": Reinforce, "ppo": PPO}


def build(algorithm, policy, settings, optimizer: str):
    algo = algorithm(policy, settings)
    if optimizer == "sgd":
        algo.optimizer = torch.optim.SGD([p for p in policy.model.parameters() if p.requires_grad],
                                         lr=settings.learning_rate)
    return algo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", nargs="+", choices=list(ALGORITHMS), default=list(ALGORITHMS))
    parser.add_argument("--optimizers", nargs="+", choices=["adamw", "sgd"], default=["adamw"])
    args = parser.parse_args()
    preset = get_preset("ci")
    for name in args.algos:
        for optimizer in args.optimizers:
            settings = rl_settings("tictactoe", preset, name)
            # chapter 4's SFT checkpoint (trained into the cache if missing): an untrained model forfeits
            # every game at once, so every advantage, and the update, would be zero
            start_dir = sft_dir("tictactoe", preset) if sft_policy("tictactoe", preset) else None
            cpu = load_policy(str(start_dir), device="cpu")
            turns = collect(cpu, "tictactoe", range(100, 132), env_options=settings.env_options, num_envs=32)
            xla = load_policy(str(start_dir), device="xla")
            xla.model.load_state_dict(cpu.model.state_dict())
            tied = xla.model.get_output_embeddings().weight is xla.model.get_input_embeddings().weight
            start = {k: v.detach().clone() for k, v in cpu.model.state_dict().items()}
            began = time.perf_counter()
            on_xla = build(ALGORITHMS[name], xla, settings, optimizer).update(turns)
            torch_xla.sync()
            seconds = time.perf_counter() - began
            on_cpu = build(ALGORITHMS[name], cpu, settings, optimizer).update(turns)
            moved = max((cpu.model.state_dict()[k] - start[k]).abs().max().item() for k in start)
            apart = max((xla.model.state_dict()[k].cpu() - cpu.model.state_dict()[k]).abs().max().item() for k in start)
            print(f"{name}, {optimizer}: {seconds:.1f} s on XLA; output layer tied to the embedding on XLA: {tied}; "
                  f"metrics XLA {on_xla}; CPU {on_cpu}")
            print(f"{name}, {optimizer}: CPU update moved {moved:.2e}, XLA vs CPU {apart:.2e} ({apart / max(moved, 1e-30):.1e} of "
                  f"the change); compilations so far {met.counter_value('UncachedCompile')} new, "
                  f"{met.counter_value('CachedCompile')} cached", flush=True)


if __name__ == "__main__":
    main()
