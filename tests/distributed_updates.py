"""One REINFORCE update and one PPO update on a fixed set of turns, split across the processes that
run this script (``tests/test_distributed.py``):

    python tests/distributed_updates.py POLICY_DIR OUT                 # one process, every turn
    accelerate launch --config_file configs/accelerate/ddp.yaml tests/distributed_updates.py POLICY_DIR OUT

Every process plays the same 12 tic-tac-toe games with the same seed (so all hold the same turns), then keeps a
contiguous share of the episodes, in rank order: the processes together hold exactly the one
process's batch. The main process writes the updated weights to ``OUT/reinforce.pt`` and
``OUT/ppo.pt``, and ``OUT/shares.json`` says how many turns each process trained on.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from tutorial_lib.lm.models import load_policy
from tutorial_lib.rl.ppo import PPO, PPOSettings
from tutorial_lib.rl.reinforce import Reinforce, ReinforceSettings
from tutorial_lib.rl.rollout import Rollout, collect
from tutorial_lib.runtime import distributed


def fixed_rollout(policy) -> Rollout:
    """12 tic-tac-toe games of the (untrained) policy against the random player: unparsable moves
    are replaced by random ones, so the games last 3-5 turns and end in wins, draws and losses."""
    torch.manual_seed(0)
    return collect(policy, "tictactoe", range(12), num_envs=12, env_options={"opponent": "random"})


def my_share(rollout: Rollout) -> Rollout:
    """This process's contiguous share of the episodes."""
    n, rank = distributed.num_processes(), distributed.process_index()
    records = rollout.records
    bounds = [len(records) * r // n for r in range(n + 1)]
    return Rollout(records[bounds[rank] : bounds[rank + 1]], rollout.seconds)


def main(policy_dir: str, out: str) -> None:
    distributed.setup()
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)

    policy = load_policy(policy_dir)
    everyone = fixed_rollout(policy)
    mine = my_share(everyone)
    # the updates in float64: summed in another order (per process, then across), float32 gradients
    # differ by ~1e-7, which Adam's first step, ~lr * sign(g), turns into visible differences where g
    # is ~0; in float64 what remains is the maths
    policy.model.double()
    reinforce = Reinforce(policy, ReinforceSettings(learning_rate=1e-2, microbatch_turns=5)).update(mine)
    reinforce_weights = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}

    policy = load_policy(policy_dir)
    policy.model.double()
    torch.manual_seed(1)  # the value head, the minibatch order: the main process's draws
    ppo = PPO(policy, PPOSettings(learning_rate=1e-2, critic_learning_rate=1e-2, kl_coef=0.1, whiten_rewards=True,
                                  minibatch_turns=8, microbatch_turns=3, ppo_epochs=2, lr_schedule="constant"))
    ppo.value_model.double()
    ppo_metrics = ppo.update(mine)
    ppo_weights = {**{k: v.detach().clone() for k, v in policy.model.state_dict().items()},
                   **{f"value_model.{k}": v.detach().clone() for k, v in ppo.value_model.state_dict().items()}}

    shares = distributed.gather([len(mine.turns)])
    if distributed.is_main():
        torch.save(reinforce_weights, out_dir / "reinforce.pt")
        torch.save(ppo_weights, out_dir / "ppo.pt")
        (out_dir / "shares.json").write_text(json.dumps({"turns": shares, "reinforce": reinforce, "ppo": ppo_metrics}))
    distributed.wait_for_everyone()


if __name__ == "__main__":
    main(*sys.argv[1:3])
