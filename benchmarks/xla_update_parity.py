"""One REINFORCE and one PPO update of the tiny model on torch_xla's device against the same update on
the CPU (issue "The TPU path runs"; record: ``benchmarks/results/xla_cpu_first_try.md``).

Needs an environment with torch_xla (not the project's ``.venv``)::

    PJRT_DEVICE=CPU USE_HUB_KERNELS=0 V/bin/python benchmarks/xla_update_parity.py

A fixed batch of tic-tac-toe turns is collected on the CPU; the XLA policy starts from the CPU
policy's weights; each algorithm's ``update`` runs once on both, and the script prints the metrics,
the largest weight change of the CPU update, the largest XLA-CPU difference and the number of graph
compilations. ``USE_HUB_KERNELS=0``: transformers' hub kernels reject the XLA device in ``train()``.
"""

import time

import torch_xla
import torch_xla.debug.metrics as met

from tutorial_lib.lm.models import load_policy
from tutorial_lib.presets import get_preset, rl_settings
from tutorial_lib.rl.ppo import PPO
from tutorial_lib.rl.reinforce import Reinforce
from tutorial_lib.rl.rollout import collect


def main() -> None:
    preset = get_preset("ci")
    for algorithm, name in ((Reinforce, "reinforce"), (PPO, "ppo")):
        settings = rl_settings("tictactoe", preset, name)
        cpu = load_policy("tiny", device="cpu")
        turns = collect(cpu, "tictactoe", range(100, 108), env_options=settings.env_options, num_envs=8)
        xla = load_policy("tiny", device="xla")
        xla.model.load_state_dict(cpu.model.state_dict())
        start = {k: v.detach().clone() for k, v in cpu.model.state_dict().items()}
        began = time.perf_counter()
        on_xla = algorithm(xla, settings).update(turns)
        torch_xla.sync()
        seconds = time.perf_counter() - began
        on_cpu = algorithm(cpu, settings).update(turns)
        moved = max((cpu.model.state_dict()[k] - start[k]).abs().max().item() for k in start)
        apart = max((xla.model.state_dict()[k].cpu() - cpu.model.state_dict()[k]).abs().max().item() for k in start)
        print(f"{name}: {seconds:.1f} s on XLA; metrics XLA {on_xla}; CPU {on_cpu}")
        print(f"{name}: CPU update moved {moved:.2e}, XLA vs CPU {apart:.2e}; compilations so far "
              f"{met.counter_value('UncachedCompile')} new, {met.counter_value('CachedCompile')} cached")


if __name__ == "__main__":
    main()
