"""The tiny model's SFT (TRL's trainer, through :func:`train_sft`) on torch_xla's device against the
same run on the CPU. The bound is the one of ``test_xla_update.py``: float32 rounding, reordered by
XLA, grows to about 1e-5 of a value at most over a short run; 1e-4 leaves room for it, and a wrong
mask or a dropped example moves a loss by far more."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

torch_xla = pytest.importorskip("torch_xla")
from tutorial_lib.data.expert_data import expert_examples  # noqa: E402
from tutorial_lib.data.sft import SFTSettings, train_sft  # noqa: E402
from tutorial_lib.lm.models import load_policy  # noqa: E402

from ..conftest import SMALL  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GAMES = 16  # GuessTheNumber expert games: 56 examples, 7 optimiser steps of 8
SETTINGS = dict(epochs=1, batch_size=8, learning_rate=1e-2, lr_scheduler="constant", logging_steps=1, report_to="none")

# the CPU's run, in a process where transformers does not look for torch_xla (USE_TORCH_XLA=0): with
# torch_xla importable, the Trainer (through accelerate) takes any model to the XLA device
CPU_RUN = f"""
import json, sys
from tests.conftest import SMALL
from tutorial_lib.data.expert_data import expert_examples
from tutorial_lib.data.sft import SFTSettings, train_sft
from tutorial_lib.lm.models import load_policy
policy = load_policy("tiny", tiny_config=SMALL, device="cpu")
result = train_sft(policy, expert_examples("guess_the_number", range({GAMES})), SFTSettings(**{SETTINGS!r}),
                   output_dir=sys.argv[1])
print(json.dumps([loss for _, loss in result.losses]))
"""


def test_sft_on_xla_trains_what_the_cpu_trains_and_saves_a_model_the_cpu_loads(tiny_cache, tmp_path):
    env = {**os.environ, "USE_TORCH_XLA": "0"}
    done = subprocess.run([sys.executable, "-c", CPU_RUN, str(tmp_path / "cpu")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    cpu_losses = json.loads(done.stdout.strip().splitlines()[-1])

    policy = load_policy("tiny", tiny_config=SMALL, device="xla")
    result = train_sft(policy, expert_examples("guess_the_number", range(GAMES)), SFTSettings(**SETTINGS),
                       output_dir=tmp_path / "xla")
    losses = [loss for _, loss in result.losses]
    assert len(losses) == len(cpu_losses) == 7
    assert losses == pytest.approx(cpu_losses, rel=1e-4)
    assert losses[-1] < 0.75 * losses[0]  # it learnt

    reloaded = load_policy(str(tmp_path / "xla"), device="cpu")
    trained = {name: value.cpu() for name, value in policy.model.state_dict().items()}
    assert all(torch.equal(reloaded.model.state_dict()[name], value) for name, value in trained.items())
