"""``benchmarks/pretrained_rl.py``: a run stopped at any point continues where it stopped, and each
finished run is recorded once (its runs last an hour on a CPU, so they span sessions)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import SMALL

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "pretrained_rl.py"


@pytest.fixture
def script(tiny_cache, monkeypatch):
    """The script as a module, with the tiny model standing in for the preset's SFT checkpoint."""
    from tutorial_lib import pipeline
    from tutorial_lib.lm.models import load_policy

    monkeypatch.setattr(pipeline, "sft_policy", lambda game, preset, **_: load_policy("tiny", tiny_config=SMALL))
    spec = importlib.util.spec_from_file_location("pretrained_rl_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(script, monkeypatch, runs: Path, out: Path, iterations: int = 2, *extra: str) -> None:
    monkeypatch.setattr(sys, "argv", ["pretrained_rl.py", "--preset", "ci", "--tasks", "gtn-50", "--seeds", "3",
                                      "--iterations", str(iterations), "--turns", "6", "--num-envs", "3", "--episodes", "4",
                                      "--runs", str(runs), "--out", str(out), *extra])
    script.main()


def test_a_run_killed_after_training_resumes_without_redoing_its_stages_and_is_recorded_once(
        script, monkeypatch, tmp_path):
    evaluations = []
    evaluate = script.evaluate
    monkeypatch.setattr(script, "evaluate", lambda *a, **k: evaluations.append(1) or evaluate(*a, **k))
    runs, out = tmp_path / "runs", tmp_path / "record.jsonl"

    def killed(*args, **kwargs):
        raise RuntimeError("killed")

    games = script.example_games
    monkeypatch.setattr(script, "example_games", killed)
    with pytest.raises(RuntimeError, match="killed"):
        call(script, monkeypatch, runs, out)
    (folder,) = runs.iterdir()
    assert (folder / "before.json").exists() and (folder / "checkpoint").exists()
    assert not out.exists() and not (folder / "record.json").exists() and len(evaluations) == 2

    monkeypatch.setattr(script, "example_games", games)
    call(script, monkeypatch, runs, out)
    assert len(evaluations) == 3  # the evaluation before RL was kept, not played again
    (line,) = out.read_text().splitlines()
    row = json.loads(line)
    assert row["task"] == "gtn-50" and row["seed"] == 3 and row["iterations"] == 2
    assert len(row["curves"]["success_rate"]) == 2  # the two iterations of the first call, none again
    assert row["before_success_rate"] == json.loads((folder / "before.json").read_text())["success_rate"]
    assert {"sft", "evaluate_before", "rl", "evaluate_after"} <= set(row["stage_seconds"])
    assert len(row["after_games"]) == script.EXAMPLE_GAMES
    assert all(1 <= game["secret"] <= 50 for game in row["after_games"])

    call(script, monkeypatch, runs, out)  # finished: nothing runs, nothing is recorded twice
    assert len(out.read_text().splitlines()) == 1 and len(evaluations) == 3

    call(script, monkeypatch, runs, out, iterations=3)  # more iterations: the same run, extended
    assert [path.name for path in runs.iterdir()] == [folder.name] and len(evaluations) == 4
    longer = json.loads(out.read_text().splitlines()[-1])
    assert longer["iterations"] == 3 and len(longer["curves"]["success_rate"]) == 3
    assert longer["curves"]["success_rate"][:2] == row["curves"]["success_rate"]
    assert len(script_lines := out.read_text().splitlines()) == 2 and json.loads(script_lines[0]) == row


def test_the_find_reward_trains_without_the_closeness_payment_in_a_run_of_its_own(script, monkeypatch, tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "record.jsonl"
    call(script, monkeypatch, runs, out, 1)
    call(script, monkeypatch, runs, out, 1, "--reward", "find")
    game, find = (json.loads(line) for line in out.read_text().splitlines())
    assert (game["reward"], find["reward"]) == ("game", "find") and len(list(runs.iterdir())) == 2
    assert find["train_options"]["closeness_reward"] is False and "closeness_reward" not in game["train_options"]
    monkeypatch.setattr(sys, "argv", ["pretrained_rl.py", "--preset", "ci", "--tasks", "ttt-x", "--reward", "find",
                                      "--runs", str(runs)])
    with pytest.raises(SystemExit, match="GuessTheNumber"):
        script.main()


def test_a_bfloat16_update_is_a_run_of_its_own_and_float32_folders_keep_their_names(script, monkeypatch, tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "record.jsonl"
    call(script, monkeypatch, runs, out, 1)
    call(script, monkeypatch, runs, out, 1, "--update-dtype", "bfloat16")
    plain, fast = (json.loads(line) for line in out.read_text().splitlines())
    assert (plain["update_dtype"], fast["update_dtype"]) == ("float32", "bfloat16")
    assert plain["run_dir"] != fast["run_dir"] and len(fast["curves"]["success_rate"]) == 1
    # the float32 folder is named as before the setting existed, so runs begun then still resume
    from argparse import Namespace

    from tutorial_lib.presets import get_preset

    args = Namespace(reward="game", iterations=1, learning_rate=None, num_envs=3, turns=6, temperature=None,
                     kl_coef=None, update_dtype=None, train_top_layers=None, pack_games=False, validate_every=0,
                     validation_episodes=50)
    settings = script.rl_run_settings("gtn-50", 3, get_preset("ci"), args)
    assert settings.update_dtype == "float32"
    assert "update_dtype" not in script.folder_description(settings, 4, "tiny", "reinforce")["settings"]
    fast = script.rl_run_settings("gtn-50", 3, get_preset("ci"), Namespace(**{**vars(args), "update_dtype": "bfloat16"}))
    assert script.folder_description(fast, 4, "tiny", "reinforce")["settings"]["update_dtype"] == "bfloat16"
    assert not {"validate_every", "validation_metric", "train_top_layers", "pack_games"} & set(
        script.folder_description(settings, 4, "tiny", "reinforce")["settings"])
    top = script.rl_run_settings("gtn-50", 3, get_preset("ci"), Namespace(**{**vars(args), "train_top_layers": 1}))
    assert script.folder_description(top, 4, "tiny", "reinforce")["settings"]["train_top_layers"] == 1
    packed = script.rl_run_settings("gtn-50", 3, get_preset("ci"), Namespace(**{**vars(args), "pack_games": True}))
    assert script.folder_description(packed, 4, "tiny", "reinforce")["settings"]["pack_games"] is True


def test_a_validated_run_is_judged_on_the_weights_its_validation_chose(script, monkeypatch, tmp_path):
    """``--validate-every``: a run of its own; its line says what validation scored and chose, on
    the game's own rules (validation plays GuessTheNumber 1-50 with the closeness payment the
    find reward removes from training), and the evaluation after RL is of the chosen weights."""
    runs, out = tmp_path / "runs", tmp_path / "record.jsonl"
    call(script, monkeypatch, runs, out, 2, "--reward", "find")
    call(script, monkeypatch, runs, out, 2, "--reward", "find", "--validate-every", "1", "--validation-episodes", "3")
    plain, validated = (json.loads(line) for line in out.read_text().splitlines())
    assert plain["run_dir"] != validated["run_dir"] and plain["validation"] is None
    assert plain["curves"]["mean_return"] == validated["curves"]["mean_return"]  # the same training
    chosen = validated["validation"]
    assert chosen["metric"] == "success_rate" and set(chosen["scores"]) == {"0", "1", "2"}
    assert chosen["scores"][str(chosen["best_iteration"])] == max(chosen["scores"].values())
    settings = json.loads((Path(validated["run_dir"]) / "rl_settings.json").read_text())
    assert settings["env_options"]["closeness_reward"] is False
    assert settings["validation_env_options"].get("closeness_reward", True) is True
    assert settings["validation_env_options"]["high"] == 50
    if chosen["best_iteration"] == 0:  # the start kept: the evaluation after is the one before
        assert validated["after_success_rate"] == validated["before_success_rate"]


def test_a_task_with_its_own_sft_games_starts_from_a_checkpoint_trained_on_them(script, monkeypatch, tmp_path):
    from tutorial_lib import pipeline
    from tutorial_lib.lm.models import load_policy

    asked = []
    monkeypatch.setattr(pipeline, "sft_policy", lambda game, preset, **options: asked.append(
        (preset.game(game).env_options, options)) or load_policy("tiny", tiny_config=SMALL))
    runs, out = tmp_path / "runs", tmp_path / "record.jsonl"
    call(script, monkeypatch, runs, out, 1)
    call(script, monkeypatch, runs, out, 1, "--tasks", "gtn-50-ranges")  # the later --tasks wins
    plain, ranges = (json.loads(line) for line in out.read_text().splitlines())
    assert asked[0][0] == {"preset": "easy"} and plain["sft_options"] is None
    wide = [options for options, _ in asked if "ranges" in options]
    assert wide and all(options["ranges"] == [[1, 10, 4], [1, 20, 5], [1, 30, 5]] for options in wide)
    assert all(extra == {"data_seed": 3} for _, extra in asked)
    assert ranges["task"] == "gtn-50-ranges" and ranges["sft_options"]["ranges"][2] == [1, 30, 5]
    # RL and the evaluation play 1-50 in 7, whatever the SFT games were
    assert ranges["train_options"]["high"] == 50 and all(1 <= g["secret"] <= 50 for g in ranges["after_games"])
    assert len(list(runs.iterdir())) == 2


def test_every_task_names_its_claim_and_plays_valid_games(script):
    """A task's headline is a metric the book knows how to judge, and each of its option sets (SFT,
    training, evaluation) makes its game: a typo in a range fails here, not an hour into a run."""
    from tutorial_lib import envs
    from tutorial_lib.report import PRETRAINED_RL_CLAIMS

    assert set(script.HEADLINE) == set(script.TASKS)
    for task, spec in script.TASKS.items():
        assert script.HEADLINE[task] in PRETRAINED_RL_CLAIMS, task
        if spec["game"] != "guess_the_number":
            continue
        for options in (spec.get("sft"), spec["train"], spec["eval"]):
            if options is not None:
                envs.make("guess_the_number", **options).close()
