"""Several processes under ``accelerate launch`` on the CPU (gloo): the same maths as one process.

* one REINFORCE update and one PPO update on a fixed set of turns, split across 2 processes, give
  the weights one process gives on all of them (in float64, where only the maths can differ);
* ``rl`` on 2 processes writes one set of outputs, and its ``--resume`` continues exactly the run
  that was stopped (every process's random state comes back); a checkpoint of 2 processes refuses
  to resume on 1;
* ``sft`` and ``rl --algo grpo`` (TRL) on 2 processes: both processes train one global batch (the
  first SFT loss is one process's), one model is written.

Each launch starts 2 Python processes that import torch and transformers: ~10-20 s apiece here.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tutorial_lib.__main__ import main as cli
from tutorial_lib.book_tools.split_update import largest_difference

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "accelerate" / "ddp.yaml"
ACCELERATE = Path(sys.executable).with_name("accelerate")


def environment() -> dict[str, str]:
    # one thread per process, as accelerate gives each of its processes: the one-process references
    # collect the same games bit for bit
    env = {**os.environ, "TUTORIAL_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.pop("WORLD_SIZE", None)
    return env


def launch(*args: str, processes: int = 2) -> subprocess.CompletedProcess:
    """``accelerate launch`` with the repository's DDP config (``processes`` of them), or plain Python
    for one process; fails the test with the processes' output when they fail."""
    if processes == 1:
        command = [sys.executable, *args]
    else:
        command = [str(ACCELERATE), "launch", "--config_file", str(CONFIG), "--num_processes", str(processes), *args]
    done = subprocess.run(command, env=environment(), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def policy_dir(tiny_policy, tmp_path_factory):
    folder = tmp_path_factory.mktemp("policy")
    tiny_policy.model.save_pretrained(folder)
    tiny_policy.tokenizer.save_pretrained(folder)
    return folder


#: how far 2 processes' logged metrics may be from 1 process's
METRIC_TOLERANCE = {
    # float32: the log-probs are (output_logits casts) and so are the advantages, and each micro-batch
    # sums ratio * advantage over its tokens in float32, in micro-batches that 1 and 2 processes cut
    # differently. The loss (-0.005 to -0.015 here) nearly cancels terms |ratio * A| ~ 1 (whitened
    # advantages, ratio ~ 1), so its rounding scales with those terms, not with it: ~20 additions per
    # SIMD lane * 6e-8 ~ 1e-6 at worst (seen: 1e-8 here, 1.1e-8 = 2.2e-6 relative on an AVX-512 Xeon).
    # A missed all-reduce or a per-process token count moves it by > 1e-3.
    "loss": dict(rel=0, abs=1e-5),
    "policy_loss": dict(rel=0, abs=1e-5),
    # float64 (value head and gradients) sums of float32 inputs that are the same values in both runs:
    # only the float64 summation order differs, ~1e-15 (seen: equal)
    **dict.fromkeys(("value_loss", "grad_norm", "explained_variance"), dict(rel=1e-6, abs=1e-9)),
}


def test_an_update_split_over_two_processes_is_the_update_of_one_process_on_all_turns(policy_dir, tmp_path):
    launch("-m", "tutorial_lib.book_tools.split_update", str(policy_dir), str(tmp_path / "one"), processes=1)
    launch("-m", "tutorial_lib.book_tools.split_update", str(policy_dir), str(tmp_path / "two"))
    one, two = (json.loads((tmp_path / run / "shares.json").read_text()) for run in ("one", "two"))
    assert len(two["turns"]) == 2 and min(two["turns"]) > 0  # both processes trained on turns of their own
    assert sum(two["turns"]) == one["turns"][0]  # ... which together are the one process's
    start = {k: v.double() for k, v in load_file(policy_dir / "model.safetensors").items()}
    for algo in ("reinforce", "ppo"):
        a, b = (torch.load(tmp_path / run / f"{algo}.pt") for run in ("one", "two"))
        moved = max(float((a[k].double() - start[k]).abs().max()) for k in start)
        assert moved > 1e-3, f"{algo}: the update moved nothing, so it compares nothing"
        # float64 weights, and every float32 input (log-probs, advantages) the same value in both runs:
        # only float64 summation order differs (~1e-16 of the gradient), which Adam amplifies at most
        # lr / eps = 1e6 times where a gradient is ~0; seen here: ~1e-13
        assert largest_difference(a, b) < 1e-10 * max(moved, 1.0), algo
        for key in ("loss", "policy_loss", "value_loss", "grad_norm", "explained_variance"):  # global metrics
            if key in one[algo]:
                assert two[algo][key] == pytest.approx(one[algo][key], **METRIC_TOLERANCE[key]), (algo, key)



def rl_command(out: Path, policy_dir: Path, iterations: int, *extra: str) -> list[str]:
    # GuessTheNumber's recipe at ci has a constant rate, so a run of 2 iterations extended to 3 is the
    # 3-iteration run (tic-tac-toe's rate falls over the run's last quarter: its schedule spans the run)
    return ["-m", "tutorial_lib", "rl", "--algo", "reinforce", "--game", "guess_the_number", "--preset", "ci", "--init",
            str(policy_dir), "--iterations", str(iterations), "--turns-per-iteration", "16", "--out", str(out),
            "--quiet", *extra]


def test_rl_on_two_processes_writes_one_set_of_outputs_and_resumes_exactly(policy_dir, tmp_path, capsys):
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    done = launch(*rl_command(whole, policy_dir, 3))
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, done.stdout  # the main process alone prints the result
    result = json.loads(lines[0])
    assert result["processes"] == 2 and result["iterations"] == 3
    # (hidden: the locks of the folders written whole, runtime.durable)
    assert sorted(p.name for p in whole.iterdir() if not p.name.startswith(".")) == [
        "checkpoint", "metrics.csv", "model", "rl_settings.json", "tensorboard"]
    assert len(list((whole / "tensorboard").iterdir())) == 1  # one writer, the main process's
    assert json.loads((whole / "rl_settings.json").read_text())["processes"] == 2
    state = torch.load(whole / "checkpoint" / "training_state.pt", weights_only=False)
    assert len(state["state"]["process_rng"]) == 2  # every process's generators

    launch(*rl_command(stopped, policy_dir, 2))
    launch(*rl_command(stopped, policy_dir, 3, "--resume"))
    assert load_file(stopped / "model" / "model.safetensors").keys() == load_file(whole / "model" / "model.safetensors").keys()
    a, b = (load_file(run / "model" / "model.safetensors") for run in (whole, stopped))
    assert all(torch.equal(a[k], b[k]) for k in a)  # the resumed run is the run never stopped, bit for bit
    rows = [(run / "metrics.csv").read_text().splitlines() for run in (whole, stopped)]
    header = rows[0][0].split(",")
    keep = [i for i, key in enumerate(header) if "seconds" not in key and "per_second" not in key]
    assert [[r.split(",")[i] for i in keep] for r in rows[0]] == [[r.split(",")[i] for i in keep] for r in rows[1]]
    assert len(rows[0]) == 4  # a header and 3 iterations
    # each iteration's seconds in collective calls: some, the gradient all-reduce part of them, and
    # never more than the iteration took
    for row in csv.DictReader(rows[0]):
        sync, grads = float(row["sync_seconds"]), float(row["grad_allreduce_seconds"])
        assert 0 < grads <= sync < float(row["sample_seconds"]) + float(row["train_seconds"])

    # one process cannot take over two processes' random streams
    code = cli(rl_command(stopped, policy_dir, 4, "--resume")[2:])
    assert code == 2
    assert "written by 2 process(es)" in capsys.readouterr().err


# GuessTheNumber's recipe merges its repeated examples (weighted rows, padded to whole global
# batches with rows of weight 0); math's trains every example as it is
@pytest.mark.parametrize("game", ["guess_the_number", "math"])
def test_sft_on_two_processes_trains_one_global_batch_and_writes_one_model(policy_dir, tmp_path, capsys, game):
    from tutorial_lib.data.expert_data import save_examples
    from tutorial_lib.pipeline import make_expert_data, sft_settings
    from tutorial_lib.presets import get_preset

    preset = get_preset("ci")
    assert sft_settings(game, preset).merge_duplicates == (game == "guess_the_number")
    data = save_examples(make_expert_data(game, preset)[:64], tmp_path / "data.jsonl")
    sft = ["-m", "tutorial_lib", "sft", "--game", game, "--preset", "ci", "--data", str(data),
           "--max-steps", "2", "--quiet"]
    two = json.loads(launch(*sft, "--out", str(tmp_path / "two")).stdout.strip().splitlines()[-1])
    one = json.loads(launch(*sft, "--out", str(tmp_path / "one"), processes=1).stdout.strip().splitlines()[-1])
    assert (two["processes"], one["processes"]) == (2, 1)
    assert two["global_batch_size"] == one["global_batch_size"]  # the recipe's batch, split over the processes
    # the first step's loss is the whole batch's: both processes computed their half, and it was averaged right
    # float32 mean of positive per-token losses (~7) in two groupings: a few ulps (6e-8 relative);
    # 1e-5 relative is ~150 of them (seen: 1 ulp)
    assert two["first_loss"] == pytest.approx(one["first_loss"], rel=1e-5)
    assert (tmp_path / "two" / "model.safetensors").exists()
    assert len(list((tmp_path / "two").glob("*.safetensors"))) == 1


def test_grpo_on_two_processes_samples_one_global_batch_and_writes_one_model(policy_dir, tmp_path):
    from tutorial_lib.presets import get_preset, grpo_settings

    out = tmp_path / "grpo"
    done = launch("-m", "tutorial_lib", "rl", "--algo", "grpo", "--game", "math", "--preset", "ci", "--init",
                  str(policy_dir), "--iterations", "2", "--out", str(out), "--quiet")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["processes"] == 2 and result["iterations"] == 2
    settings = grpo_settings("math", get_preset("ci"))
    rows = (out / "metrics.csv").read_text().splitlines()
    episodes = rows[0].split(",").index("episodes")
    # every step scored the recipe's completions: each process sampled its half, gathered for the groups
    assert [float(r.split(",")[episodes]) for r in rows[1:]] == [settings.completions_per_step] * 2
    assert (out / "model" / "model.safetensors").exists()
    assert json.loads((out / "rl_settings.json").read_text())["processes"] == 2


def test_one_process_spends_no_time_in_collectives():
    from tutorial_lib.runtime import distributed

    distributed.take_sync_seconds()
    assert distributed.gather([1, 2]) == [1, 2] and distributed.sum_over_processes(3.0) == 3.0
    assert distributed.take_sync_seconds() == {"sync_seconds": 0.0, "grad_allreduce_seconds": 0.0}
