"""The sentences chapters print from their results, and the records they read."""

import dataclasses
import json
import math

import pytest

from tutorial_lib import presets, records, report
from tutorial_lib.evaluation import stats
from tutorial_lib.runtime.device import cpu_name


def test_spread_and_count_phrases():
    assert stats.spread([0.1, 0.3, 0.2]) == "mean 0.200 (min 0.100, max 0.300, 3 runs)"
    assert stats.spread([0.5]).endswith("1 run)")
    with pytest.raises(ValueError):
        stats.spread([])
    assert report.count_phrase(3, 3, "seeds") == "all 3 seeds"
    assert report.count_phrase(0, 3, "seeds") == "none of the 3 seeds"
    assert report.count_phrase(2, 3, "seeds") == "2 of 3 seeds"
    assert report.count_phrase(2, 2, "runs") == "both runs"
    assert report.count_phrase(0, 2, "runs") == "neither of the 2 runs"


def test_halves_and_trend():
    history = [{"x": 0.0}, {"x": 1.0}, {"x": 2.0}, {"x": 4.0}, {"y": 9.0}]
    assert stats.halves(history, "x") == (0.5, 3.0)
    assert report.trend(history, "x", "the x", digits=1) == "the x 0.5 over the first half of the run, 3.0 over the second"
    with pytest.raises(ValueError, match="at least 2"):
        stats.halves(history, "y")


def test_say_wraps_to_the_page(capsys):
    report.say("word " * 60, "and a second sentence.")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 2 and all(len(line) <= report.WIDTH for line in lines)
    assert lines[-1].endswith("and a second sentence.")


def test_recorded_runs_reads_json_lines_and_tolerates_a_missing_record(tmp_path, monkeypatch, capsys):
    (tmp_path / "study.jsonl").write_text('{"seed": 0, "after": 0.5}\n\n{"seed": 1, "after": 0.7}\n')
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    assert records.recorded_runs("study.jsonl") == [{"seed": 0, "after": 0.5}, {"seed": 1, "after": 0.7}]
    assert records.recorded_runs("absent.jsonl") == []
    assert "clone the repository" in " ".join(capsys.readouterr().out.split())


def test_record_run_prints_and_appends_what_recorded_runs_reads(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    records.record_run({"seed": 0, "after": 0.5}, tmp_path / "study.jsonl")
    records.record_run({"seed": 1, "after": 0.7}, tmp_path / "study.jsonl")
    records.record_run({"seed": 2, "after": 0.9})  # printed only
    cpu = cpu_name()  # every line names the CPU that computed it
    assert capsys.readouterr().out.splitlines()[-1] == json.dumps({"seed": 2, "after": 0.9, "cpu": cpu})
    assert records.recorded_runs("study.jsonl") == [{"seed": 0, "after": 0.5, "cpu": cpu},
                                                   {"seed": 1, "after": 0.7, "cpu": cpu}]


def test_recorded_runs_keep_to_the_preset_and_model_they_were_recorded_with(tmp_path, monkeypatch, capsys):
    from tutorial_lib.presets import PRESETS

    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    ci, small = PRESETS["ci"], PRESETS["small"]
    records.record_run({"seed": 0, "after": 0.5}, tmp_path / "study.jsonl", preset=ci)
    records.record_run({"seed": 0, "after": 0.9}, tmp_path / "study.jsonl", preset=small)
    capsys.readouterr()
    assert records.recorded_runs("study.jsonl", ci) == [{"preset": "ci", "model": "tiny", "seed": 0, "after": 0.5,
                                                        "cpu": cpu_name()}]
    assert [row["after"] for row in records.recorded_runs("study.jsonl", small)] == [0.9]
    assert capsys.readouterr().out == ""  # each preset has its rows: nothing to explain
    # a preset with no rows of its own (the same name, another model) gets none, and is told whose they are
    assert records.recorded_runs("study.jsonl", dataclasses.replace(ci, model="smollm2-135m")) == []
    told = " ".join(capsys.readouterr().out.split())
    assert "ci with tiny and small with smollm2-135m" in told and "--preset ci" in told


def test_every_recorded_study_names_its_preset_and_model():
    """A study's run names the preset it ran at; a benchmark's measurement (which takes its model
    and settings from its command line) names the model and the device instead."""
    for path in sorted(records.RESULTS_DIR.glob("*.jsonl")):
        for row in records.recorded_runs(path.name):
            if "preset" in row:
                assert row["preset"] in presets.SCALES and row["model"], path.name
            else:
                assert row["benchmark"] and row["model"] and row["device"] and row["command"], path.name


@pytest.mark.parametrize("recipe", ["ttt-reinforce", "ttt-ppo"])
@pytest.mark.parametrize("opponent", sorted(records.TICTACTOE_OPPONENT_RECORDS))
def test_tictactoe_opponent_records_hold_several_seeds_of_each_recipe(recipe, opponent):
    # chapters 5 and 6 compare the training opponents from these records, and read the chosen one's grid
    runs = records.tictactoe_opponent_runs(recipe, opponent)
    assert len({run["seed"] for run in runs}) >= 2
    for run in runs:
        assert run.get("train_opponent", "random") in (None, opponent)
        for key in ("minimax_draw_rate", "random_loss_rate"):
            assert 0.0 <= run[f"before_{key}"] <= 1.0 and 0.0 <= run[f"after_{key}"] <= 1.0


@pytest.mark.parametrize("recipe, algo", [("ttt-reinforce", "reinforce"), ("ttt-ppo", "ppo")])
def test_the_chapters_tictactoe_recipes_have_recorded_cells_over_seeds(recipe, algo):
    # chapters 5 and 6 show the grid cells of the recipe they run: a change to the preset's recipe
    # needs its grid recorded again (benchmarks/rl_numerics_grid.py), or the chapters show none
    from tutorial_lib.presets import rl_settings

    preset = presets.get_preset("ci")
    runs = records.tictactoe_recipe_runs(recipe, rl_settings("tictactoe", preset, algo), preset)
    assert len({run["seed"] for run in runs}) >= 3


def test_math_record_has_each_study_and_algorithm_over_several_seeds():
    runs = records.recorded_runs("math_rl_seeds.jsonl")
    studies = {(run["study"], run["algo"]) for run in runs}
    # REINFORCE's lines were recorded with GEM's ReBN, before the baseline per state, and say so
    assert studies == {("chapter 6", "PPO"), ("chapter 7", "REINFORCE + ReBN"), ("chapter 7", "PPO"),
                       ("chapter 7", "GRPO (TRL)")}
    for study in studies:
        seeds = [run["data_seed"] for run in runs if (run["study"], run["algo"]) == study]
        assert len(set(seeds)) >= 3 and len(seeds) == len(set(seeds))
    for run in runs:
        for key in ("before_train", "after_train", "before_new", "after_new"):
            assert 0.0 <= run[key] <= 1.0


def test_across_runs_counts_each_runs_verdict():
    rows = [{"b": 0.50, "a": 0.80}, {"b": 0.50, "a": 0.52}, {"b": 0.50, "a": 0.90}]
    sentence = report.across_runs(rows, "draws", "b", "a", episodes=200)
    assert sentence.startswith("draws: better in 2 of 3 runs, within noise in 1 of 3 runs (before: mean 0.500")
    assert "after: mean 0.740 (min 0.520, max 0.900, 3 runs)" in sentence
    falling = [{"b": 0.2, "a": 0.0}] * 2
    assert "better in both runs" in report.across_runs(falling, "losses", "b", "a", 200, higher_is_better=False)
    assert "worse in both runs" in report.across_runs(falling, "wins", "b", "a", 200)
    with pytest.raises(ValueError, match="no runs"):
        report.across_runs([], "x", "b", "a", 200)


def test_show_source_prints_the_current_code_of_a_loss(capsys):
    from tutorial_lib.rl.ppo import PPO, clipped_surrogate

    report.show_source(clipped_surrogate)  # outside a notebook: printed
    out = capsys.readouterr().out
    assert out.startswith("# tutorial_lib.rl.ppo.clipped_surrogate\ndef clipped_surrogate(")
    assert "ratio.clamp(1 - clip_range, 1 + clip_range)" in out
    assert report.source_text(PPO.update).startswith("def update(self, rollout")  # a method, dedented


def test_tictactoe_grid_counts_each_change_and_tabulates_every_cell(capsys):
    cells = [dict(kernels=kernels, threads=threads, seed=0, before_minimax_draw_rate=0.5, after_minimax_draw_rate=after,
                  before_random_loss_rate=0.05, after_random_loss_rate=0.05)
             for (kernels, threads), after in zip([("default", 1), ("default", 2), ("avx2", 1)], [0.8, 0.8, 0.5])]
    cells[1]["seed"] = 1  # another start that also rose
    table = report.tictactoe_grid(cells)
    said = " ".join(capsys.readouterr().out.split())
    # two cells rose from .5 to .8 over 200 games (beyond noise), one stayed; the losses never moved
    assert "draws against minimax: better in 2 of 3 runs, within noise in 1 of 3 runs" in said
    assert "losses against random: within noise in all 3 runs" in said
    assert list(table.index.names) == ["kernels", "threads", "seed", "perturbed"] and len(table) == 3
    assert set(table.index.get_level_values("perturbed")) == {"no"}
    perturbed = dict(cells[0], perturbation={"seed": 2, "scale": 1e-6}, after_minimax_draw_rate=0.4)
    # whatever order the record holds them in, a perturbed row sits right under its unperturbed row
    index = list(report.tictactoe_grid([perturbed, *cells]).index)
    assert index.index(("default", 1, 0, "noise seed 2, 1e-06")) == index.index(("default", 1, 0, "no")) + 1
    assert index == sorted(index)
    # a cell that repeats another's run exactly (same seed, same curve, same results) counts once
    twin = dict(cells[0], kernels="avx2")
    report.tictactoe_grid([*cells, twin])
    said = " ".join(capsys.readouterr().out.split())
    assert "1 of 4 cells repeated another cell's run bit for bit and count once" in said
    assert "better in 2 of 3 runs" in said
    assert list(table.columns) == ["before minimax draw", "after minimax draw", "before random loss", "after random loss"]


def test_tictactoe_opponents_counts_each_records_distinct_runs(monkeypatch, tmp_path):
    def cell(seed, after_draw, after_loss, **extra):
        return dict(preset="ci", model="tiny", recipe="ttt-ppo", seed=seed, before_minimax_draw_rate=0.5,
                    after_minimax_draw_rate=after_draw, before_random_loss_rate=0.10, after_random_loss_rate=after_loss,
                    **extra)
    by_opponent = {"random": [cell(0, 0.5, 0.02), cell(0, 0.5, 0.02, kernels="avx2"),  # the twin counts once
                          cell(1, 0.2, 0.10), dict(cell(1, 0.9, 0.1), recipe="ttt-reinforce")],
               "mixed": [cell(0, 0.8, 0.10), cell(1, 0.9, 0.25)]}  # "minimax": no record, no row
    for opponent, rows in by_opponent.items():
        (tmp_path / records.TICTACTOE_OPPONENT_RECORDS[opponent]).write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    table = report.tictactoe_opponents("ttt-ppo")
    assert list(table.index) == ["random", "mixed"]
    # random: draws .5 -> .5 (noise) and .5 -> .2 (worse); losses .10 -> .02 (better) and .10 -> .10 (noise)
    assert table.loc["random"].tolist() == [2, "0 / 1 / 1", "1 / 1 / 0"]
    # mixed: draws rose in both; losses held in one and rose (.10 -> .25, worse) in the other
    assert table.loc["mixed"].tolist() == [2, "2 / 0 / 0", "0 / 1 / 1"]
    # the runs of one length only (a record may hold two recipes of one algorithm)
    longer = dict(cell(2, 0.2, 0.10), iterations=60)
    path = tmp_path / records.TICTACTOE_OPPONENT_RECORDS["mixed"]
    path.write_text(path.read_text() + json.dumps(longer) + "\n")
    assert report.tictactoe_opponents("ttt-ppo").loc["mixed", "runs"] == 3
    only = report.tictactoe_opponents("ttt-ppo", iterations=60)
    assert list(only.index) == ["mixed"] and only.loc["mixed"].tolist() == [1, "0 / 0 / 1", "0 / 1 / 0"]


def test_pretrained_rl_summary_counts_each_tasks_claim(capsys):
    def run(task, seed, key, before, after):
        return {"task": task, "seed": seed, "algo": "reinforce", "model": "smollm2-135m", "device": "GPU B",
                "eval_episodes": 200, "iterations": 30, "headline": key, f"before_{key}": before,
                f"after_{key}": after, "seconds": 120.0}

    rows = [run("ttt-x", 0, "minimax_draw_rate", .40, .70), run("ttt-x", 1, "minimax_draw_rate", .45, .47),
            run("gtn-100", 0, "success_rate", .30, .20)]
    table = report.pretrained_rl_summary(rows)
    said = capsys.readouterr().out.replace("\n", " ")
    assert "ttt-x (reinforce, smollm2-135m on GPU B, each seed's longest run: 30 iterations" in said
    assert "draws against minimax: better in 1 of 2 runs, within noise in 1 of 2 runs" in said
    assert "success rate: worse in 1 of 1 run (" in said
    assert table.loc[("ttt-x", "", 0), "after"] == .70 and table.loc[("gtn-100", "", 0), "minutes"] == 2.0


def test_pretrained_rl_records_read_one_line_per_run_with_curves_verdicts_and_changed_games():
    game = {"seed": 0, "secret": 30, "guesses": [5, 8, 9, 10, 11, 12, 13], "success": False}
    first = {"preset": "small", "task": "gtn-50", "seed": 0, "device": "CPU A", "run_dir": "/runs/a", "algo": "reinforce",
             "model": "smollm2-135m", "eval_episodes": 200, "iterations": 3, "headline": "success_rate",
             "before_success_rate": .275, "after_success_rate": .5, "seconds": 600.0,
             "curves": {"success_rate": [.2, .3, .4], "mean_return": [.7, .8]}}
    # the same run recorded again with its example games: the later line counts
    again = {**first, "before_games": [game, {**game, "seed": 1, "secret": 9, "guesses": [5, 8, 9], "success": True}],
             "after_games": [{**game, "guesses": [5, 25, 37, 31, 30], "success": True},
                             {**game, "seed": 1, "secret": 9, "guesses": [5, 8, 9], "success": True}]}
    other = {**first, "seed": 1, "run_dir": "/runs/b", "after_success_rate": .29}
    assert records.latest_runs([first, again, other]) == [again, other]
    table = report.pretrained_rl_summary([first, again, other])
    assert list(table["verdict"]) == ["better", "noise"] and len(table) == 2
    longer = {**again, "iterations": 6, "run_dir": "/runs/a2", "after_success_rate": .6}
    assert records.longest_runs([first, again, other, longer]) == [longer, other]
    histories = report.pretrained_rl_histories([again])
    assert histories["gtn-50, seed 0"] == [{"step": 1, "success_rate": .2, "mean_return": .7},
                                          {"step": 2, "success_rate": .3, "mean_return": .8}, {"step": 3, "success_rate": .4}]
    games = report.guessing_games([again, other])
    assert games.to_dict("records") == [{"run": "gtn-50, seed 0, 3 iterations", "secret": 30, "SFT's guesses": "5 8 9 10 11 12 13",
                                         "after RL": "5 25 37 31 30 +"}]
    assert len(report.guessing_games([again, {**again, "run_dir": "/runs/c"}], limit=1)) == 2  # a limit per run
    assert report.guessing_games([again], limit=0).empty


def test_pretrained_rl_records_keep_each_recipe_apart(capsys):
    base = {"preset": "small", "task": "gtn-50", "seed": 0, "device": "CPU A", "algo": "reinforce", "model": "smollm2-135m",
            "eval_episodes": 200, "iterations": 12, "headline": "success_rate", "before_success_rate": .275,
            "after_success_rate": .30, "seconds": 1500.0, "learning_rate": 1e-4, "temperature": 1.5, "num_envs": 16,
            "run_dir": "/runs/game", "curves": {"success_rate": [.3, .4]}}
    find = {**base, "reward": "find", "run_dir": "/runs/find", "after_success_rate": .60}
    assert records.pretrained_rl_recipe(base) == "lr 0.0001, T 1.5, 16 games"
    assert records.pretrained_rl_recipe(find) == "lr 0.0001, T 1.5, 16 games, reward: the find only"
    assert records.longest_runs([base, find]) == [base, find]  # the same seed under two recipes: two runs
    held = {**find, "kl_coef": 0.1, "run_dir": "/runs/held"}
    assert records.pretrained_rl_recipe(held) == "lr 0.0001, T 1.5, 16 games, reward: the find only, KL penalty 0.1"
    fast = {**held, "update_dtype": "bfloat16"}
    assert records.pretrained_rl_recipe(fast).endswith("KL penalty 0.1, update in bfloat16")
    top = {**fast, "train_top_layers": 8, "run_dir": "/runs/top"}
    assert records.pretrained_rl_recipe(top).endswith("update in bfloat16, top 8 layers trained")
    assert records.longest_runs([fast, top]) == [fast, top]  # the top layers only: another recipe
    assert records.pretrained_rl_recipe({**fast, "train_top_layers": 0}) == records.pretrained_rl_recipe(fast)
    assert records.pretrained_rl_recipe({**find, "kl_coef": 0.0}) == records.pretrained_rl_recipe(find)
    chosen = {**held, "validate_every": 3, "validation": {"episodes": 50, "best_iteration": 6}, "run_dir": "/runs/chosen"}
    assert records.pretrained_rl_recipe(chosen).endswith("KL penalty 0.1, model chosen on 50 validation games every 3 iterations")
    assert records.pretrained_rl_recipe({**held, "validate_every": 0}) == records.pretrained_rl_recipe(held)
    assert records.longest_runs([held, chosen]) == [held, chosen]
    assert list(report.pretrained_rl_summary([held, chosen])["model of iteration"]) == [12, 6]
    assert records.longest_runs([find, held]) == [find, held]
    table = report.pretrained_rl_summary([base, find])
    said = capsys.readouterr().out.replace("\n", " ")
    assert "gtn-50, lr 0.0001, T 1.5, 16 games (reinforce" in said and "within noise in 1 of 1 run" in said
    assert "reward: the find only (reinforce" in said and "better in 1 of 1 run" in said
    assert list(table["verdict"]) == ["noise", "better"]
    assert set(report.pretrained_rl_histories([base, find])) == {"gtn-50, seed 0, lr 0.0001, T 1.5, 16 games",
                                                                  "gtn-50, seed 0, lr 0.0001, T 1.5, 16 games, reward: the find only"}
    elsewhere = {**find, "device": "Intel(R) Xeon(R) Processor (bfloat16 in hardware: amx_bf16)", "run_dir": "/runs/x"}
    assert records.cpu_label(elsewhere["device"]) == "Intel Xeon"
    assert records.longest_runs([find, elsewhere]) == [find, elsewhere]  # the same seed on two CPUs: two starts
    assert set(report.pretrained_rl_histories([find, elsewhere])) == {
        "gtn-50, seed 0 (CPU A)", "gtn-50, seed 0 (Intel Xeon)"}  # one recipe: named by seed and CPU


def test_grid_holds_counts_what_a_grid_covers_and_says_what_it_lacks():
    import pandas as pd

    rows = [{"seed": 0, "threads": 1, "kernels": "avx2", "cpu": "AMD EPYC"},
            {"seed": 1, "threads": 2, "kernels": "avx2", "cpu": "AMD EPYC"},
            {"seed": 1, "threads": 1}]  # a row that names no kernels or CPU
    said = report.grid_holds(rows)
    assert said == ("3 runs over 2 seeds (0, 1), 2 thread counts (1, 2), 1 kernel set (avx2), "
                    "recorded on 1 CPU (AMD EPYC)")
    assert report.grid_holds(pd.DataFrame(rows).to_dict("records")) == said  # NaN where a row lacks a column
    assert "0 CPUs (none named)" in report.grid_holds([{"seed": 0}])
    perturbed = [*rows, {"seed": 0, "threads": 2, "perturbation": {"seed": 1, "scale": 1e-6}}]
    assert report.grid_holds(perturbed).endswith("; 1 of them from a perturbed start")
    assert report.grid_holds(pd.DataFrame(perturbed).to_dict("records")).endswith("; 1 of them from a perturbed start")


def test_tictactoe_recipe_runs_are_the_cells_of_the_recipe_a_chapter_trains(monkeypatch, tmp_path):
    from dataclasses import replace

    from tutorial_lib.rl.ppo import PPOSettings

    chapter = PPOSettings(iterations=20, learning_rate=1e-3, env_options={"opponent": "mixed"})
    other = replace(chapter, learning_rate=3e-4)
    # plumbing (the seed, micro-batches) is not part of a recipe
    assert records.recipe_settings(replace(chapter, seed=3, microbatch_turns=8)) == records.recipe_settings(chapter)
    assert records.recipe_settings(chapter)["adam_betas"] == [0.9, 0.95]  # as JSON reads it back

    def cell(settings, perturbation=None, recipe="ttt-ppo", **extra):
        return dict(preset="ci", model="tiny", recipe=recipe, seed=0, threads=2, kernels="default",
                    perturbation=perturbation, settings=records.recipe_settings(settings), **extra)
    older = records.recipe_settings(chapter)
    del older["warmup_iterations"]  # a row recorded before the library had this setting (default then)
    by_file = {"tictactoe_rl_mixed_opponent.jsonl": [cell(chapter), cell(other), cell(chapter, recipe="ttt-reinforce"),
                                                     dict(cell(chapter), settings=older)],
               "tictactoe_rl_perturbed.jsonl": [cell(chapter, {"seed": 1, "scale": 1e-6}), {"recipe": "ttt-ppo"}]}
    for name, rows in by_file.items():
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    runs = records.tictactoe_recipe_runs("ttt-ppo", chapter)
    # this recipe's cells from both files; not another learning rate, algorithm, or a row naming no settings
    assert [run["perturbation"] for run in runs] == [None, None, {"seed": 1, "scale": 1e-6}]
    assert len(records.tictactoe_recipe_runs("ttt-ppo", other)) == 1
    assert records.tictactoe_recipe_runs("ttt-ppo", replace(chapter, iterations=60)) == []


def test_a_recorded_run_is_named_by_its_game_in_words():
    ranges = {"task": "gtn-50-ranges-40", "game": "guess_the_number", "seed": 2,
              "train_options": {"preset": None, "low": 1, "high": 50, "max_turns": 7},
              "sft_options": {"preset": None, "ranges": [[1, 10, 4], [1, 20, 5], [1, 30, 5], [1, 40, 6]]}}
    assert records.pretrained_run_name(ranges) == "1-50 in 7, SFT on 1-10/20/30/40, seed 2"
    assert records.pretrained_run_name({**ranges, "sft_options": None}) == "1-50 in 7, seed 2"
    ttt = {"task": "ttt-x", "game": "tictactoe", "seed": 0, "train_options": {"agent_mark": "x"}}
    assert records.pretrained_run_name(ttt) == "tic-tac-toe as x, seed 0"
    assert records.pretrained_run_name({"task": "math", "game": "math", "seed": 1, "train_options": {}}) == "math, seed 1"


def test_grid_paths_follow_each_distinct_cell_from_start_to_end():
    def cell(seed, perturbation, curve, middle, end):
        return dict(recipe="ttt-reinforce", seed=seed, perturbation=perturbation, kernels="avx2", threads=1,
                    iterations=120, return_curve=curve, before_minimax_draw_rate=.585, after_minimax_draw_rate=end,
                    after_random_loss_rate=0.0,
                    evaluations=[{"iteration": 60, "minimax_draw_rate": middle, "random_loss_rate": 0.0}])
    rows = [cell(0, None, [0.1], .75, .93), cell(0, {"seed": 2, "scale": 1e-6}, [0.2], .79, .905),
            dict(cell(0, None, [0.1], .75, .93), threads=2)]  # the same run again, bit for bit: drawn once
    paths = report.grid_paths(rows, "minimax_draw_rate")
    assert list(paths.values()) == [[(0, .585), (60, .75), (120, .93)], [(0, .585), (60, .79), (120, .905)]]
    assert list(paths)[1] == "seed 0, noise seed 2, 1e-06, avx2, 1 thread"


def test_evaluation_paths_draws_a_line_a_run_and_a_panel_a_recipe():
    import matplotlib

    matplotlib.use("Agg")
    from tutorial_lib.plotting import evaluation_paths

    groups = {"constant": {"a": [(0, .5), (60, .7), (120, .8)], "b": [(0, .5), (120, .9)]},
              "decay": {"a": [(0, .5), (120, .95)]}}
    fig = evaluation_paths(groups, title="t", ylabel="draws", level=.85)
    assert [ax.get_title() for ax in fig.axes] == ["constant (2 runs)", "decay (1 run)"]  # a panel a recipe
    runs = [[line for line in ax.get_lines() if line.get_linestyle() != ":"] for ax in fig.axes]
    assert [[list(line.get_xdata()) for line in lines] for lines in runs] == [[[0, 60, 120], [0, 120]], [[0, 120]]]
    assert [list(runs[0][1].get_ydata()), list(runs[1][0].get_ydata())] == [[.5, .9], [.5, .95]]
    assert all([line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"] == [.85] for ax in fig.axes)
    assert fig.axes[0].get_ylim() == fig.axes[1].get_ylim()  # shared: the recipes compare at a glance
    matplotlib.pyplot.close("all")
    with pytest.raises(ValueError, match="no runs"):
        evaluation_paths({"constant": {}, "decay": {"a": []}}, title="t", ylabel="draws")


def test_level_counts_reads_each_cell_at_half_way_and_at_its_end():
    paths = {"a": [(0, .5), (60, .9), (120, .88)], "b": [(0, .6), (60, .7), (120, .97)], "c": [(0, .5), (120, .8)]}
    reading, at_end = report.level_counts(paths, .85, 60)
    # c was not evaluated half-way: it counts at its end only
    assert reading == "at or above 0.85 in 1 of 2 cells at iteration 60, in 2 of 3 cells at the end (ends 0.800 to 0.970)"
    assert at_end == "2 of 3 cells"


def test_glue_hands_myst_nb_python_numbers_not_numpy_scalars(monkeypatch):
    import myst_nb
    import numpy as np

    glued = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: glued.__setitem__(name, (value, display)))
    report.glue("rate", np.float64(0.25))
    report.glue("count", np.int64(3))
    report.glue("words", "a phrase")
    assert glued["rate"] == (0.25, False) and type(glued["rate"][0]) is float
    assert type(glued["count"][0]) is int
    assert glued["words"] == ("a phrase", False)
    # '{:.3f}'.format works on what the book receives: the text role formats it
    assert f"{glued['rate'][0]:.3f}" == "0.250"


def test_glue_change_says_which_way_a_change_went(monkeypatch):
    import myst_nb

    glued = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: glued.__setitem__(name, value))
    rise = stats.compare_rates("draws", 0.5, 0.9, episodes=200)
    assert report.glue_change("draws", rise) is rise
    assert glued["draws_before"] == 0.5 and glued["draws_after"] == 0.9
    assert glued["draws_verdict"] == "a rise beyond noise"
    report.glue_change("flat", stats.compare_rates("draws", 0.5, 0.51, episodes=200))
    assert glued["flat_verdict"] == "a change within noise"
    report.glue_change("same", stats.compare_rates("draws", 0.38, 0.38, episodes=50))  # as printed: no change
    assert glued["same_verdict"] == "no change"
    report.glue_change("fall", stats.compare_rates("losses", 0.5, 0.1, episodes=200, higher_is_better=False))
    assert glued["fall_verdict"] == "a fall beyond noise"


def test_tidy_gives_counts_integers_and_each_column_one_format():
    import re

    import pandas as pd

    frame = pd.DataFrame({"episodes": [200.0, 128.0], "rate": [1.0, 0.955], "label": ["a", "b"]})
    cells = re.findall(r">([^<>]+)</td>", report.tidy(frame).to_html())
    assert cells == ["200", "1.000", "a", "128", "0.955", "b"]
    by_row = re.findall(r">([^<>]+)</td>", report.tidy(frame[["episodes", "rate"]].T, digits=1, by="row").to_html())
    assert by_row == ["200", "128", "1.0", "1.0"]
    big = re.findall(r">([^<>]+)</td>", report.tidy(pd.DataFrame({"tokens": [151346.0]})).to_html())
    assert big == ["151,346"]
    # a rate that happens to be 0 or 1 everywhere is still a rate
    rates = re.findall(r">([^<>]+)</td>", report.tidy(pd.DataFrame({"success": [1.0, 1.0], "invalid": [0.0, 0.0]})).to_html())
    assert rates == ["1.000", "0.000", "1.000", "0.000"]
    # a column named in decimals gets its own number of decimals; a name the table lacks is an error
    steps = pd.DataFrame({"success": [0.5], "mean steps": [11.4375]})
    assert re.findall(r">([^<>]+)</td>", report.tidy(steps, decimals={"mean steps": 1}).to_html()) == ["0.500", "11.4"]
    with pytest.raises(KeyError, match="mean stpes"):
        report.tidy(steps, decimals={"mean stpes": 1})


def test_heldout_cells_count_the_level_and_the_collapses(monkeypatch, tmp_path):
    lines = [{"recipe": "ttt-reinforce", "start": f"start {k}", "before_minimax_draw_rate": 0.55,
              "after_minimax_draw_rate": draws, "after_random_loss_rate": None, "random_losses_verdict": verdict}
             for k, (draws, verdict) in enumerate([(0.9, "noise"), (0.85, "noise"), (0.3, "worse"), (0.8, "noise")])]
    lines.append({**lines[0], "recipe": "ttt-ppo"})
    (tmp_path / records.TICTACTOE_HELDOUT_RECORD).write_text("".join(json.dumps(line) + "\n" for line in lines))
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    frame, reached, collapsed = report.heldout_cells("ttt-reinforce")
    assert (len(frame), reached, collapsed) == (4, 2, 1)
    assert list(frame["reached 0.85"]) == ["yes", "yes", "no", "no"]
    assert frame.loc["start 2", "losses vs the start"] == "worse"


def test_the_heldout_record_holds_both_chapters_recipes():
    for recipe in ("ttt-reinforce", "ttt-ppo"):
        frame, reached, _ = report.heldout_cells(recipe)
        assert len(frame) >= 4 and 0 < reached <= len(frame)


def test_wrapped_folds_only_the_long_lines():
    text = "short  line, kept exactly\n" + "word " * 30
    lines = report.wrapped(text, width=40).splitlines()
    assert lines[0] == "short  line, kept exactly"
    assert len(lines) > 2 and all(len(line) <= 40 for line in lines)
    assert " ".join(lines[1:]).split() == ["word"] * 30


def test_tidy_escapes_text_so_tags_stay_visible():
    import pandas as pd

    html_table = report.tidy(pd.DataFrame({"format": ["<move>x(1,2)</move>"]})).to_html()
    assert "&lt;move&gt;x(1,2)&lt;/move&gt;" in html_table and "<move>" not in html_table


def test_guard_cells_pair_each_start_with_and_without_validation(monkeypatch, tmp_path):
    def line(seed, guarded, draws, losses, kept=None):
        return {"recipe": "ttt-reinforce", "perturbation": {"seed": seed, "scale": 1e-6},
                "overrides": {"validate_every": 10} if guarded else {}, "before_minimax_draw_rate": 0.585,
                "after_minimax_draw_rate": draws, "before_random_loss_rate": 0.015, "after_random_loss_rate": losses,
                "rl_seconds": 110.0 if guarded else 100.0,
                **({"validation": {"best_iteration": kept}} if guarded else {})}

    lines = [line(12, False, 0.335, 0.225), line(12, True, 0.86, 0.02, kept=40),
             line(13, False, 0.91, 0.01), line(13, True, 0.91, 0.01, kept=120),
             line(14, False, 0.9, 0.0),  # 14 waits for a guarded run: not in the table
             {**line(15, False, 0.9, 0.0), "rl_seconds": 500.0, "shared_cpu": True},  # timed beside other work:
             {**line(15, True, 0.9, 0.0, kept=120), "shared_cpu": True}]  # in the table, not in the time ratio
    for row in lines[:2]:  # a start that names its build: the label says which machine trained it
        row.update(cpu="AMD EPYC", cpu_capability="AVX2")
    (tmp_path / records.TICTACTOE_GUARDS_RECORD).write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    frame, counts = report.guard_cells()
    assert list(frame.index) == ["perturbed (seed 13)", "perturbed (seed 15)",  # by build, then seed
                                 "AMD EPYC (AVX2) build, perturbed (seed 12)"]
    assert frame.loc["AMD EPYC (AVX2) build, perturbed (seed 12)", ("validation kept", "iteration")] == 40
    assert counts == {"no guard": 2, "validation": 3, "no guard, worse losses": 1, "validation, worse losses": 0,
                      "no guard, starts": 3, "validation, starts": 3, "time ratio": 1.1}


def test_guard_cells_add_a_column_for_each_other_guard_on_the_starts_it_ran(monkeypatch, tmp_path):
    def line(seed, overrides, draws, losses):
        return {"recipe": "ttt-reinforce", "perturbation": {"seed": seed, "scale": 1e-6}, "overrides": overrides,
                "before_minimax_draw_rate": 0.585, "after_minimax_draw_rate": draws, "before_random_loss_rate": 0.015,
                "after_random_loss_rate": losses, "rl_seconds": 100.0,
                **({"validation": {"best_iteration": 10}} if "validate_every" in overrides else {})}

    validate = {"validate_every": 10, "validation_episodes": 100}
    lines = [line(13, {}, 0.62, 0.11), line(13, validate, 0.595, 0.03), line(13, {"kl_coef": 0.1}, 0.85, 0.0),
             line(13, {"learning_rate": 5e-4}, 0.845, 0.01), line(11, {}, 0.93, 0.005), line(11, validate, 0.945, 0.005),
             line(11, {"kl_coef": 0.1, "learning_rate": 5e-4}, 0.9, 0.0)]  # a combination: not a column
    (tmp_path / records.TICTACTOE_GUARDS_RECORD).write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    frame, counts = report.guard_cells()
    assert [g for m, g in frame.columns if m == "draws vs minimax"] == [
        "SFT start", "no guard", "validation", "KL penalty β 0.1", "learning rate 0.0005"]
    assert frame.loc["perturbed (seed 13)", ("draws vs minimax", "KL penalty β 0.1")] == 0.85
    assert math.isnan(frame.loc["perturbed (seed 11)", ("draws vs minimax", "KL penalty β 0.1")])  # not run there
    assert (counts["KL penalty β 0.1"], counts["KL penalty β 0.1, starts"]) == (1, 1)
    assert (counts["learning rate 0.0005"], counts["learning rate 0.0005, starts"]) == (0, 1)  # .845 < .85
    assert (counts["no guard, worse losses"], counts["no guard"]) == (1, 1)


def test_guard_cells_keep_the_same_seed_on_two_builds_apart(monkeypatch, tmp_path):
    def line(capability, overrides, draws):
        return {"recipe": "ttt-reinforce", "perturbation": {"seed": 13, "scale": 1e-6}, "overrides": overrides,
                "cpu": "AMD EPYC", "cpu_capability": capability, "before_minimax_draw_rate": 0.55,
                "after_minimax_draw_rate": draws, "before_random_loss_rate": 0.015, "after_random_loss_rate": 0.01,
                "rl_seconds": 100.0, **({"validation": {"best_iteration": 10}} if "validate_every" in overrides else {})}

    lines = [line("AVX2", {}, 0.62), line("AVX2", {"validate_every": 10}, 0.595),
             line("AVX512", {}, 0.59), line("AVX512", {"learning_rate": 5e-4}, 0.915),  # no validation run on it
             {**line("AVX512", {"learning_rate": 5e-4}, 0.9), "perturbation": {"seed": 11, "scale": 1e-6}}]  # one guard only
    (tmp_path / records.TICTACTOE_GUARDS_RECORD).write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    frame, counts = report.guard_cells()
    assert list(frame.index) == ["AMD EPYC (AVX2) build, perturbed (seed 13)", "AMD EPYC (AVX512) build, perturbed (seed 11)",
                                 "AMD EPYC (AVX512) build, perturbed (seed 13)"]
    assert frame[("draws vs minimax", "no guard")].tolist()[::2] == [0.62, 0.59]  # neither overwrote the other
    assert math.isnan(frame.loc["AMD EPYC (AVX512) build, perturbed (seed 11)", ("draws vs minimax", "no guard")])
    assert math.isnan(frame.loc["AMD EPYC (AVX512) build, perturbed (seed 13)", ("validation kept", "iteration")])
    assert (counts["no guard, starts"], counts["validation, starts"], counts["learning rate 0.0005, starts"]) == (2, 1, 2)
    assert counts["learning rate 0.0005"] == 2 and counts["no guard"] == 0


def test_metrics_table_says_metrics_in_words_and_means_with_one_decimal():
    import re

    import pandas as pd

    frame = pd.DataFrame({"success_rate": [0.5], "mean_steps": [11.4375], "invalid_rate": [0.0]})
    html_table = report.metrics_table(frame, success_rate="greedy success").to_html()
    assert re.findall(r">([^<>]+)</th>", html_table)[-4:-1] == ["greedy success", "mean steps", "invalid actions"]
    assert re.findall(r">([^<>]+)</td>", html_table) == ["0.500", "11.4", "0.000"]
    by_row = report.metrics_table(frame.T, by="row").to_html()
    assert re.findall(r">([^<>]+)</td>", by_row) == ["0.500", "11.4", "0.000"]


def test_verdict_cells_judge_a_recipe_only_once_every_cell_is_in(monkeypatch, tmp_path):
    recipe = {"learning_rate": 5e-4, "iterations": 120}

    def line(seed, draws, losses, settings=recipe, algo="ttt-reinforce"):
        return {"recipe": algo, "perturbation": {"seed": seed, "scale": 1e-6}, "threads": 1 if seed < 9013 else 2,
                "settings": settings, "before_minimax_draw_rate": 0.55, "after_minimax_draw_rate": draws,
                "before_random_loss_rate": 0.015, "after_random_loss_rate": losses}

    def write(lines):
        (tmp_path / records.TICTACTOE_VERDICT_RECORD).write_text("".join(json.dumps(x) + "\n" for x in lines))

    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    others = [line(9001, 0.2, 0.3, settings={**recipe, "learning_rate": 1e-3}),  # another recipe
              line(9002, 0.2, 0.3, algo="ttt-ppo")]
    cells = [line(seed, 0.9, 0.01) for seed in range(9002, 9019)]  # 17 cells, all at the level
    write(others + cells)
    frame, summary = report.verdict_cells("ttt-reinforce", recipe)
    assert summary == {"cells": 17, "reached": 17, "worse": 0, "needed": 17, "holds": None}  # one cell missing
    assert list(frame.index)[:2] == [9002, 9003] and frame.loc[9013, "threads"] == "2"

    write(others + cells + [line(9001, 0.80, 0.02)])  # the 18th cell, below the level: 17 of 18 still hold
    frame, summary = report.verdict_cells("ttt-reinforce", recipe)
    assert (summary["cells"], summary["reached"], summary["holds"]) == (18, 17, True)
    assert frame.loc[9001, "reached 0.85"] == "no" and frame.index[0] == 9001

    write(others + cells[1:] + [line(9001, 0.80, 0.02), line(9002, 0.80, 0.02)])  # two below: 16 of 18
    assert report.verdict_cells("ttt-reinforce", recipe)[1]["holds"] is False

    write(others + cells[:-1] + [line(9001, 0.9, 0.01), line(9018, 0.95, 0.09)])  # at the level, losses worse
    frame, summary = report.verdict_cells("ttt-reinforce", recipe)
    assert (summary["reached"], summary["worse"], summary["holds"]) == (18, 1, False)
    assert frame.loc[9018, "losses vs the start"] == "worse"


def test_collapsed_start_is_the_lowest_unguarded_run_with_a_guard_on_training(monkeypatch, tmp_path):
    def line(capability, seed, overrides, draws):
        return {"recipe": "ttt-reinforce", "perturbation": {"seed": seed, "scale": 1e-6}, "overrides": overrides,
                "cpu": "AMD EPYC", "cpu_capability": capability, "before_minimax_draw_rate": 0.55,
                "after_minimax_draw_rate": draws, "return_curve": [0.1, draws]}

    lines = [line("AVX2", 13, {}, 0.5), line("AVX2", 13, {"validate_every": 10}, 0.6),  # lowest, but no training guard
             line("AVX2", 12, {}, 0.7), line("AVX2", 12, {"kl_coef": 0.1}, 0.9),
             line("AVX512", 13, {}, 0.59), line("AVX512", 13, {"kl_coef": 0.1}, 0.94),
             line("AVX512", 13, {"learning_rate": 5e-4}, 0.915), line("AVX512", 11, {"learning_rate": 5e-4}, 0.9)]
    (tmp_path / records.TICTACTOE_GUARDS_RECORD).write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    label, runs = report.collapsed_start()
    assert label == "AMD EPYC (AVX512) build, perturbed (seed 13)"
    assert list(runs) == ["no guard", "KL penalty β 0.1", "learning rate 0.0005"]
    assert runs["no guard"]["after_minimax_draw_rate"] == 0.59
    assert report.collapsed_start("ttt-ppo") == (None, {})


def test_the_verdict_record_keeps_to_the_cells_the_protocol_fixed():
    """heldout_protocol.md fixed the verdict cells before any ran: seeds 9001-9012 with one thread,
    9013-9018 with two, chapter 4's checkpoint perturbed at 1e-6, 200 games an opponent. A line
    outside them, or a cell run twice for one recipe, would let a recipe be judged on chosen cells."""
    rows = records.read_json_lines(records.RESULTS_DIR / records.TICTACTOE_VERDICT_RECORD)
    assert rows, "the verdict record is empty"
    seen = set()
    for row in rows:
        seed = row["perturbation"]["seed"]
        assert 9001 <= seed <= 9000 + records.TICTACTOE_VERDICT_CELLS, seed
        assert row["threads"] == (1 if seed <= 9012 else 2), (seed, row["threads"])
        assert row["perturbation"]["scale"] == 1e-6 and row["preset"] == "ci" and row["recipe"] in ("ttt-reinforce", "ttt-ppo")
        cell = (row["recipe"], json.dumps(row["settings"], sort_keys=True), seed)
        assert cell not in seen, f"cell run twice: {cell[0]}, seed {seed}"
        seen.add(cell)
