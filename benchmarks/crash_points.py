"""What the next process finds after a writer is killed at each of its file-system operations.

    python benchmarks/crash_points.py            # a table: writer, operations, found old / new / nothing

For each writer of state a later run trusts, a forked copy of this process replaces an older
version with a newer one and dies (``os._exit``, as SIGKILL) just before its k-th file-system
operation, for every k; this process then reads what is left as the next run would (recovering
first) and counts what it found. "nothing" is a failure for a writer that replaces an older state.
The same injector as ``tests/test_crash_safety.py``, which asserts what this prints.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.test_crash_safety import run_killed  # noqa: E402
from tutorial_lib.runtime import durable  # noqa: E402
from tutorial_lib.runtime.tracking import MetricsLog, load_checkpoint, save_checkpoint  # noqa: E402


def model_at(step: int):
    torch.manual_seed(step)
    model = torch.nn.Linear(8, 8)
    return model, torch.optim.Adam(model.parameters())


def checkpoint(root: Path):
    folder = root / "checkpoint"
    return (lambda: save_checkpoint(folder, *model_at(1), step=1),
            lambda: save_checkpoint(folder, *model_at(2), step=2),
            lambda: load_checkpoint(folder, *model_at(0))[0])


def metrics(root: Path):
    def write(step):
        log = MetricsLog(root, tensorboard=False, resume_from=step - 1)
        log.write(step, {"mean_return": step / 10})
    return (lambda: write(1), lambda: write(2),
            lambda: len(MetricsLog(root, tensorboard=False, resume_from=10).rows))


def file(root: Path):
    path = root / "data.jsonl"
    return (lambda: durable.write_text(path, "1\n" * 1000), lambda: durable.write_text(path, "2\n" * 2000),
            lambda: int(path.read_text()[0]))


def folder(root: Path):
    def build(version):
        with durable.building(root / "cache") as staging:
            (staging / "weights.bin").write_text(str(version) * 1000)
            (staging / "config.json").write_text(json.dumps({"version": version}))
    return (lambda: build(1), lambda: build(2),
            lambda: json.loads((root / "cache" / "config.json").read_text())["version"]
            if durable.recover(root / "cache") else None)


def main() -> None:
    print(f"{'writer':<34} {'operations':>10} {'found old':>10} {'found new':>10} {'nothing':>8}")
    for name, writer in [("RL checkpoint (save_checkpoint)", checkpoint), ("metrics.csv row (MetricsLog)", metrics),
                         ("a file (durable.write_text)", file), ("a folder (durable.building)", folder)]:
        with tempfile.TemporaryDirectory() as probe:
            operations = run_killed(writer(Path(probe))[1], None)
        found = {1: 0, 2: 0, None: 0}
        for k in range(1, operations + 1):
            with tempfile.TemporaryDirectory() as root:
                first, second, read = writer(Path(root))
                first()
                run_killed(second, k)
                try:
                    found[read()] += 1
                except (OSError, ValueError):
                    found[None] += 1
        print(f"{name:<34} {operations:>10} {found[1]:>10} {found[2]:>10} {found[None]:>8}")


if __name__ == "__main__":
    main()
