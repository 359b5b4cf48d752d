"""The command line: data -> sft -> evaluate, as a GPU user would run it (tiny sizes here)."""

import json

import pytest

from tutorial_lib.__main__ import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "game, extra, keys",
    [
        ("tictactoe", ["--opponent", "minimax"], {"win_rate", "draw_rate", "loss_rate", "invalid_rate"}),
        ("cookingworld", ["--fold", "test"], {"success_rate", "mean_score", "mean_steps", "invalid_rate"}),
        ("guess_the_number", [], {"success_rate", "mean_turns", "invalid_rate"}),
        ("math", [], {"accuracy", "format_accuracy"}),
    ],
)
def test_evaluate_prints_one_json_object_with_the_game_keys(capsys, small_policy_dir, game, extra, keys):
    code, out, _ = run(capsys, "evaluate", "--game", game, "--policy", str(small_policy_dir), "--episodes", "3",
                       "--preset", "ci", "--json", *extra)
    assert code == 0
    metrics = json.loads(out)
    assert keys <= set(metrics) and metrics["episodes"] == 3
    assert 0 <= metrics["invalid_rate"] <= 1 if "invalid_rate" in metrics else True


def test_evaluate_math_reads_fold_as_the_problem_split(capsys, small_policy_dir):
    args = ["evaluate", "--game", "math", "--policy", str(small_policy_dir), "--episodes", "2", "--json"]
    code, out, _ = run(capsys, *args, "--fold", "train")
    assert code == 0 and json.loads(out)["fold"] == "train"
    code, _, err = run(capsys, *args, "--fold", "dev")
    assert code == 2 and "no dev split" in err


def test_data_writes_loadable_json_lines(capsys, tmp_path):
    code, out, _ = run(capsys, "data", "--game", "guess_the_number", "--preset", "ci", "--out", str(tmp_path), "--quiet")
    assert code == 0
    summary = json.loads(out)
    lines = (tmp_path / "guess_the_number.jsonl").read_text().splitlines()
    assert summary["examples"] == len(lines) > 300
    assert {"prompt", "completion"} <= set(json.loads(lines[0]))


def test_sft_from_a_data_file_then_evaluate(capsys, tmp_path, tiny_cache):
    run(capsys, "data", "--game", "guess_the_number", "--preset", "ci", "--out", str(tmp_path), "--quiet")
    code, out, _ = run(capsys, "sft", "--game", "guess_the_number", "--preset", "ci", "--out", str(tmp_path / "sft"),
                       "--data", str(tmp_path / "guess_the_number.jsonl"), "--epochs", "0.05")
    assert code == 0 and json.loads(out)["examples"] > 300
    code, out, _ = run(capsys, "evaluate", "--game", "guess_the_number", "--policy", str(tmp_path / "sft"),
                       "--episodes", "2", "--json")
    assert code == 0 and "success_rate" in json.loads(out)


def test_errors_are_clear_and_do_not_crash(capsys, tmp_path):
    code, _, err = run(capsys, "sft", "--game", "math", "--preset", "ci", "--out", str(tmp_path), "--data",
                       str(tmp_path / "missing.jsonl"))
    assert code == 2 and "no expert data" in err
    with pytest.raises(SystemExit):
        main(["evaluate", "--game", "chess", "--policy", "tiny"])


def test_qlora_on_a_machine_without_cuda_is_a_clear_error(capsys, tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setenv("TUTORIAL_MODEL", "Qwen/Qwen2.5-0.5B-Instruct")
    (tmp_path / "d.jsonl").write_text('{"prompt": "p", "completion": "c"}\n')
    code, _, err = run(capsys, "sft", "--game", "math", "--preset", "ci", "--out", str(tmp_path / "o"),
                       "--data", str(tmp_path / "d.jsonl"), "--load-in-4bit")
    assert code == 2 and "CUDA" in err


def test_rl_runs_then_resumes_and_its_model_evaluates(capsys, tmp_path, small_policy_dir):
    out = tmp_path / "rl"
    # the preset's settings, smaller: the command line's changes (8 turns bring the games down to 8)
    common = ["rl", "--game", "tictactoe", "--preset", "ci", "--init", str(small_policy_dir), "--out", str(out), "--quiet",
              "--turns-per-iteration", "8", "--save-every", "1"]
    code, stdout, _ = run(capsys, *common, "--iterations", "1")
    assert code == 0
    first = json.loads(stdout)
    assert first["iterations"] == 1 and set(first["last"]) == {"mean_return", "success_rate", "invalid_rate"}
    code, stdout, _ = run(capsys, *common, "--iterations", "2", "--resume")
    assert code == 0 and json.loads(stdout)["iterations"] == 2
    assert (out / "metrics.csv").read_text().count("\n") == 3  # header + one row per iteration
    by_model = run(capsys, "evaluate", "--game", "tictactoe", "--policy", str(out / "model"), "--episodes", "2",
                   "--preset", "ci", "--json")
    assert by_model[0] == 0 and "loss_rate" in json.loads(by_model[1])
    # the run's folder names the same model (it is in model/), and plays the same games
    by_run = run(capsys, "evaluate", "--game", "tictactoe", "--policy", str(out), "--episodes", "2", "--preset", "ci", "--json")
    assert by_run[0] == 0
    assert {**json.loads(by_run[1]), "policy": None} == {**json.loads(by_model[1]), "policy": None}
    # a folder with no model in it says so, instead of a tokenizer or hub error
    (tmp_path / "no-model").mkdir()
    code, _, err = run(capsys, "evaluate", "--game", "tictactoe", "--policy", str(tmp_path / "no-model"), "--episodes", "2",
                       "--preset", "ci", "--json")
    assert code == 2 and "holds no model" in err


def test_rl_ppo_runs_and_saves_its_value_model(capsys, tmp_path, small_policy_dir):
    out = tmp_path / "ppo"
    code, stdout, _ = run(capsys, "rl", "--algo", "ppo", "--game", "math", "--preset", "ci", "--init",
                          str(small_policy_dir), "--out", str(out), "--iterations", "1", "--turns-per-iteration", "4",
                          "--update-dtype", "bfloat16", "--quiet")
    assert code == 0
    settings = json.loads((out / "rl_settings.json").read_text())  # 4 turns: 4 games, minibatches of 4
    assert (settings["turns_per_iteration"], settings["num_envs"], settings["minibatch_turns"]) == (4, 4, 4)
    assert settings["update_dtype"] == "bfloat16"
    assert json.loads(stdout)["algo"] == "ppo"
    assert (out / "model" / "value_model.pt").exists()
    assert "policy_loss" in (out / "metrics.csv").read_text().splitlines()[0]


def test_rl_can_choose_its_model_on_validation_games(capsys, tmp_path, small_policy_dir):
    out = tmp_path / "chosen"
    code, stdout, _ = run(capsys, "rl", "--game", "math", "--preset", "ci", "--init", str(small_policy_dir),
                          "--out", str(out), "--iterations", "2", "--turns-per-iteration", "4", "--validate-every", "2",
                          "--validation-episodes", "3", "--validation-metric", "accuracy", "--quiet")
    assert code == 0
    chosen = json.loads(stdout)["validation"]
    assert chosen["metric"] == "accuracy" and set(chosen["scores"]) == {"0", "2"}
    assert json.loads((out / "validation.json").read_text()) == chosen
    code, _, err = run(capsys, "rl", "--game", "math", "--preset", "ci", "--init", str(small_policy_dir),
                       "--out", str(tmp_path / "bad"), "--iterations", "1", "--turns-per-iteration", "4",
                       "--validate-every", "1", "--validation-metric", "draw_rate", "--quiet")
    assert code == 2 and "not a metric of math" in err


def test_rl_resume_without_checkpoint_is_a_clear_error(capsys, tmp_path, small_policy_dir):
    code, _, err = run(capsys, "rl", "--game", "guess_the_number", "--preset", "ci", "--init", str(small_policy_dir),
                       "--out", str(tmp_path), "--resume", "--quiet")
    assert code == 2 and "no checkpoint" in err
    code, _, err = run(capsys, "rl", "--algo", "grpo", "--game", "math", "--preset", "ci", "--init", str(small_policy_dir),
                       "--out", str(tmp_path / "grpo"), "--update-dtype", "bfloat16", "--quiet")
    assert code == 2 and "GRPO" in err and not (tmp_path / "grpo").exists()
    code, _, err = run(capsys, "rl", "--algo", "ppo", "--game", "math", "--preset", "ci", "--init", str(small_policy_dir),
                       "--out", str(tmp_path / "ppo"), "--pack-games", "--quiet")  # packing is REINFORCE's
    assert code == 2 and "pack_games" in err and not (tmp_path / "ppo").exists()


def test_evaluate_takes_game_options_and_rejects_malformed_ones(capsys, small_policy_dir):
    args = ["evaluate", "--game", "guess_the_number", "--policy", str(small_policy_dir), "--episodes", "2", "--json"]
    code, out, _ = run(capsys, *args, "--env", "preset=hard", "--env", "max_turns=3")
    assert code == 0 and json.loads(out)["mean_turns"] <= 3
    with pytest.raises(SystemExit):
        main([*args, "--env", "preset"])
    assert "KEY=VALUE" in capsys.readouterr().err
