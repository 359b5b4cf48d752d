"""Chapter 4's longest cell beside a busy neighbour: how much slack does the cell timeout leave?

    python benchmarks/sft_part_under_load.py [--neighbour-threads 0 1] [--part 1 3]

The cell is one part of CookingWorld's SFT run (``train_sft(..., stage=(1, 3))``, the `ci` preset),
trained into a temporary folder so the cache is not touched. With ``--neighbour-threads 0`` it runs
alone; with N > 0 a second process keeps N threads busy with matrix products (``benchmarks/threads.py``'s
neighbour) for the whole part. Prints one JSON line per setting: the part's training seconds and
their ratio to the book's per-cell timeout (``execute.timeout`` in ``_config.yml``).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def train_part(part: int, parts: int) -> float:
    from tutorial_lib.data.sft import train_sft
    from tutorial_lib.lm.models import load_policy
    from tutorial_lib.pipeline import expert_data, sft_settings
    from tutorial_lib.presets import get_preset

    preset = get_preset("ci")
    examples = expert_data("cookingworld", preset)
    settings = replace(sft_settings("cookingworld", preset), progress=False, report_to="none")
    with tempfile.TemporaryDirectory() as folder:
        # parts before `part` are trained first (untimed): a later part resumes from their checkpoint
        for earlier in range(1, part):
            train_sft(load_policy(preset.model), examples, settings, output_dir=folder, stage=(earlier, parts))
        start = time.perf_counter()
        train_sft(load_policy(preset.model), examples, settings, output_dir=folder, stage=(part, parts))
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--neighbour-threads", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--part", type=int, nargs=2, default=[1, 3], metavar=("I", "N"))
    args = parser.parse_args()
    timeout = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]["timeout"]
    for threads in args.neighbour_threads:
        busy = None
        if threads:
            busy = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "threads.py"), "--neighbour", str(threads)])
            time.sleep(2)
        try:
            seconds = train_part(*args.part)
        finally:
            if busy is not None:
                busy.kill()
        print(json.dumps({"cell": f"cookingworld SFT part {args.part[0]} of {args.part[1]}", "neighbour_threads": threads,
                          "seconds": round(seconds, 1), "cell_timeout": timeout,
                          "share_of_timeout": round(seconds / timeout, 2)}), flush=True)


if __name__ == "__main__":
    main()
