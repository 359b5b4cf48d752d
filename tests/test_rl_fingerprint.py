"""``benchmarks/rl_fingerprint.py``: two fingerprints compared name every run and metric that moved."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "rl_fingerprint.py"


def load_script():
    spec = importlib.util.spec_from_file_location("rl_fingerprint", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(weights="a", value=None, losses=(0.5, 0.25)):
    return {"weights": weights, "value_model": value, "history": [{"step": i + 1, "loss": x} for i, x in enumerate(losses)]}


def test_identical_fingerprints_have_no_differences():
    differences = load_script().differences
    assert differences({"reinforce": run()}, {"reinforce": run()}) == []


def test_every_moved_number_is_named():
    differences = load_script().differences
    before = {"reinforce": run(), "ppo": run(value="v")}
    after = {"reinforce": run(losses=(0.5, 0.25 + 1e-12)), "ppo": run(weights="b", value="w"), "grpo": run()}
    found = differences(before, after)
    assert "reinforce, iteration 2: loss 0.25 -> 0.250000000001" in found
    assert "ppo: weights differs" in found and "ppo: value_model differs" in found
    assert "grpo: only in the new fingerprint" in found
    assert differences({"ppo": run()}, {"ppo": run(losses=(0.5,))}) == ["ppo: 2 iterations -> 1"]
