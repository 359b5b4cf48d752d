"""Steps per second of each game under a random policy, and the ratio to the slowest game.

    python benchmarks/env_steps.py [--steps 5000]

The games' own cost, without any model: a lower bound on what a rollout of that game can cost.
"""

import argparse

from tutorial_lib import envs
from tutorial_lib.evaluation.evaluate import steps_per_second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()
    speeds = {game: steps_per_second(game, steps=args.steps) for game in envs.GAMES}
    slowest = min(speeds.values())
    print(f"{'game':18} {'steps/s':>10} {'x slowest':>10}")
    for game, speed in sorted(speeds.items(), key=lambda kv: -kv[1]):
        print(f"{game:18} {speed:10.0f} {speed / slowest:10.1f}")


if __name__ == "__main__":
    main()
