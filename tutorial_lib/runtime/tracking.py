"""Metrics logs and resumable checkpoints for training runs (chapter 5 on).

    log = MetricsLog(out_dir)                  # metrics.csv + TensorBoard events under out_dir
    log.write(step, {"mean_return": 0.4, ...})
    save_checkpoint(out_dir / "checkpoint", model, optimizer, step=10, state={...})
    step, state = load_checkpoint(out_dir / "checkpoint", model, optimizer)

An RL run on a laptop or a preemptible Colab GPU gets interrupted. Resuming it must give the run
it would have been: the same weights, optimiser moments, and random streams. So a checkpoint holds
everything the next iteration reads: the trainable weights (the LoRA adapters only, under PEFT),
the optimiser's state, the iteration counter, the caller's own state (a sampler seed...) and the
random-number generators of Python, NumPy and PyTorch. ``tests/test_reinforce.py`` checks that a
run stopped and resumed ends with exactly the weights of an uninterrupted one.

A run can also be killed in the middle of writing a checkpoint or a log row. Both are written whole
(:mod:`tutorial_lib.runtime.durable`): the next process finds the older checkpoint or the newer one,
never half of one, and a file damaged some other way gives an error that names it and says what to
do. ``tests/test_crash_safety.py`` kills the writers at every file-system operation.
"""

from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tutorial_lib.runtime import durable


class MetricsLog:
    """One row of metrics per step, to ``metrics.csv`` and to TensorBoard (``tensorboard --logdir``).

    With ``resume_from`` (the step of the checkpoint a run resumes from), the existing
    ``metrics.csv`` keeps its rows up to that step and drops later ones, which the resumed run
    writes again. Without it, the file starts afresh. ``files=False`` keeps the rows in memory only
    (the processes of a run other than the main one: one process writes the files).
    """

    def __init__(self, out_dir: str | Path, *, tensorboard: bool = True, resume_from: int | None = None,
                 files: bool = True):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / "metrics.csv"
        self.files = files
        self.rows: list[dict[str, Any]] = []
        if resume_from is not None and self.path.exists():
            self.rows = [row for row in read_metrics(self.path) if row["step"] <= resume_from]
        self.writer = None
        if not files:
            return
        self._rewrite()
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.out_dir / "tensorboard"))

    def write(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **metrics}
        self.rows.append(row)
        if not self.files:
            return
        self._rewrite()
        if self.writer is not None:
            for key, value in metrics.items():
                self.writer.add_scalar(key, value, step)
            self.writer.flush()

    def _rewrite(self) -> None:
        # The whole file each time, written whole: a few hundred rows at most, and a new metric in a
        # later row (or a crash mid-write) can never leave a ragged CSV.
        keys = list(dict.fromkeys(k for row in self.rows for k in row)) or ["step"]
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=keys)
        writer.writeheader()
        writer.writerows(self.rows)
        durable.write_text(self.path, text.getvalue())

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.csv``. This library writes the file whole, so a torn last row means
    another program cut it: that row is dropped with a warning (a resumed run writes it again). Any
    other damage raises an error that names the file and the line."""
    path = Path(path)
    with path.open(newline="") as f:
        lines = list(csv.reader(f))
    if not lines or "step" not in lines[0]:
        raise ValueError(f"{path} is not a metrics log (no 'step' column): delete it, or start without --resume")
    header = lines[0]

    def parse(line: list[str]) -> dict[str, Any]:
        if len(line) != len(header):
            raise ValueError(f"{len(line)} fields, the header has {len(header)}")
        return _numbers(dict(zip(header, line)))

    return durable.parse_lines(path, lines[1:], parse, first=2,
                               fix="delete the file (the run's curves start again) or start without --resume")


def _numbers(row: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if value in ("", None):
            continue
        number = float(value)
        out[key] = int(number) if key == "step" else number
    if "step" not in out:
        raise ValueError("no step")
    return out


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def trainable_state(model) -> dict[str, torch.Tensor]:
    """The weights that training changes: all of them, or only the adapters under PEFT."""
    if hasattr(model, "peft_config"):
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(model)
    return model.state_dict()


def load_trainable_state(model, weights: dict[str, torch.Tensor]) -> None:
    """Put weights :func:`trainable_state` took back into ``model`` (the adapters only, under PEFT)."""
    if hasattr(model, "peft_config"):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, weights)
    else:
        model.load_state_dict(weights)


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: the message names it and says what to do."""


def on_cpu(value: Any) -> Any:
    """``value`` with every tensor in it copied to the CPU (a CPU tensor is kept as it is): a
    checkpoint then loads on any machine, and an XLA tensor, whose storage is the device's, can be
    pickled at all (torch_xla's ``xm.save`` does the same)."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {key: on_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_cpu(item) for item in value)
    return value


def save_checkpoint(
    folder: str | Path,
    model,
    optimizer,
    *,
    step: int,
    state: dict[str, Any] | None = None,
    modules: dict[str, torch.nn.Module] | None = None,
) -> Path:
    """Write a resumable checkpoint to ``folder``, replacing an older one whole: a crash at any
    instant leaves the older checkpoint or this one (:func:`tutorial_lib.runtime.durable.building`).

    ``modules`` are trained modules besides ``model`` (PPO's value head or critic), saved by name.
    """
    payload = on_cpu({
        "step": step,
        "weights": trainable_state(model),
        "optimizer": optimizer.state_dict(),
        "rng": rng_state(),
        "state": state or {},
        "modules": {name: trainable_state(module) for name, module in (modules or {}).items()},
    })
    with durable.building(folder) as staging:
        torch.save(payload, staging / "training_state.pt")
        (staging / "step.json").write_text(json.dumps({"step": step}))
    return Path(folder)


def has_checkpoint(folder: str | Path) -> bool:
    """Whether ``folder`` holds a complete checkpoint, after recovering from an interrupted write."""
    return durable.recover(folder)


def load_checkpoint(
    folder: str | Path, model, optimizer, *, modules: dict[str, torch.nn.Module] | None = None
) -> tuple[int, dict[str, Any]]:
    """Restore weights, optimiser and random state from ``folder``; returns (step, caller's state).

    ``modules`` must name the same extra modules :func:`save_checkpoint` was given.
    """
    folder = Path(folder)
    path = folder / "training_state.pt"
    if not has_checkpoint(folder):
        if path.exists():
            raise CheckpointError(f"the checkpoint at {folder} is incomplete (its files do not match the list of "
                                  f"what was written: cut short, or written by something else): delete {folder} to "
                                  "start again, or start without --resume")
        raise FileNotFoundError(f"no checkpoint at {folder} (expected {path.name}); start without --resume")
    try:
        saved = torch.load(path, weights_only=False)
    except Exception as error:  # a damaged zip or pickle: the bare error names neither the file nor a way out
        raise CheckpointError(f"the checkpoint {path} cannot be read ({type(error).__name__}: {error}): it is "
                              f"damaged; delete {folder} and start without --resume") from error
    load_trainable_state(model, saved["weights"])
    stored = saved.get("modules", {})
    if set(stored) != set(modules or {}):
        raise ValueError(f"the checkpoint at {folder} holds modules {sorted(stored)}, not {sorted(modules or {})}: "
                         "was it written by another algorithm?")
    for name, module in (modules or {}).items():
        load_trainable_state(module, stored[name])
    optimizer.load_state_dict(saved["optimizer"])
    set_rng_state(saved["rng"])
    return int(saved["step"]), saved["state"]
