"""One REINFORCE update and one PPO update on a fixed set of turns, split across the processes that
run this module: the check that N processes take the update of one (chapter 10 runs it;
``tests/test_distributed.py`` asserts on it):

    python -m tutorial_lib.book_tools.split_update POLICY_DIR OUT              # one process, every turn
    accelerate launch --config_file configs/accelerate/ddp.yaml -m tutorial_lib.book_tools.split_update POLICY_DIR OUT

:func:`compare` runs both and says how far apart their weights ended.

Every process plays the same 12 tic-tac-toe games with the same seed (so all hold the same turns), then keeps a
contiguous share of the episodes, in rank order: the processes together hold exactly the one
process's batch. The main process writes the updated weights to ``OUT/reinforce.pt`` and
``OUT/ppo.pt``, and ``OUT/shares.json`` says how many turns each process trained on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from tutorial_lib.lm.models import load_policy
from tutorial_lib.rl.ppo import PPO, PPOSettings
from tutorial_lib.rl.reinforce import Reinforce, ReinforceSettings
from tutorial_lib.rl.rollout import Rollout, collect
from tutorial_lib.runtime import distributed
from tutorial_lib.runtime.progress import quiet_transformers


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


def launch(policy_dir: str | Path, out: str | Path, processes: int) -> None:
    """Run :func:`main` on ``processes`` CPU processes (``accelerate launch`` for more than one), one
    thread each; raises with the processes' output if they fail."""
    module = ["-m", "tutorial_lib.book_tools.split_update", str(policy_dir), str(out)]
    if processes == 1:
        command = [sys.executable, *module]
    else:
        # accelerate's one-process-per-device launcher (torchrun); on a machine without a GPU the
        # library joins the processes on the CPU (runtime.distributed), as configs/accelerate/ddp.yaml does
        command = [str(Path(sys.executable).with_name("accelerate")), "launch", "--multi_gpu", "--num_machines", "1",
                   "--num_processes", str(processes), "--mixed_precision", "no", "--dynamo_backend", "no", *module]
    env = {**os.environ, "TUTORIAL_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}  # the maths, on the CPU
    env.pop("WORLD_SIZE", None)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")


def largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between two state dicts' tensors (the same keys)."""
    if a.keys() != b.keys():
        raise ValueError("the two sets of weights have different tensors")
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def compare(policy, out: str | Path, processes: int = 2) -> dict[str, dict[str, float]]:
    """Both runs, one process and ``processes``, from ``policy`` (a loaded policy, saved to
    ``out/policy`` first, or the folder of a saved one); per algorithm, how far the update moved the
    weights and how far the split update ended from the one-process update."""
    out = Path(out)
    if isinstance(policy, (str, Path)):
        policy_dir = Path(policy)
    else:
        policy_dir = out / "policy"
        with quiet_transformers():  # no "Writing model shards" bar on the page
            policy.model.save_pretrained(policy_dir)
            policy.tokenizer.save_pretrained(policy_dir)
    for n in (1, processes):
        launch(policy_dir, out / f"{n}-process", n)
    start = {k: v.double() for k, v in load_state(Path(policy_dir)).items()}
    result = {}
    for algo in ("reinforce", "ppo"):
        one, split = (torch.load(out / f"{n}-process" / f"{algo}.pt") for n in (1, processes))
        result[algo] = {"largest weight change of the update": largest_difference({k: one[k] for k in start}, start),
                        f"largest difference, 1 process against {processes}": largest_difference(one, split)}
    shares = json.loads((out / f"{processes}-process" / "shares.json").read_text())["turns"]
    if len(shares) != processes:
        raise RuntimeError(f"the split run ran on {len(shares)} process(es), not {processes}")
    result["turns per process"] = {f"process {rank}": float(count) for rank, count in enumerate(shares)}
    return result


def load_state(policy_dir: Path) -> dict[str, torch.Tensor]:
    """The weights saved in ``policy_dir`` (safetensors)."""
    from safetensors.torch import load_file

    return load_file(policy_dir / "model.safetensors")


if __name__ == "__main__":
    main(*sys.argv[1:3])
