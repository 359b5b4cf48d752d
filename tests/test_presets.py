import pytest

from tutorial_lib import presets


def test_env_var_selects_preset_and_model(monkeypatch):
    monkeypatch.setenv("TUTORIAL_SCALE", "full")
    assert presets.get_preset().model == presets.DEFAULT_HUB_MODEL
    monkeypatch.setenv("TUTORIAL_SCALE", "small")
    assert presets.get_preset().model == presets.DEFAULT_OFFLINE_MODEL
    monkeypatch.setenv("TUTORIAL_SCALE", "full")
    monkeypatch.setenv("TUTORIAL_MODEL", "smollm2-135m")
    assert presets.get_preset() == presets.replace(presets.PRESETS["full"], model="smollm2-135m")
    assert "preset=full" in presets.describe() and "model=smollm2-135m" in presets.describe()


def test_settings_follow_the_model_not_only_the_scale(monkeypatch):
    """A pretrained model named at ci gets the small preset's LoRA settings, never the tiny model's
    (full fine-tuning at lr 3e-3 for 45 epochs would wreck it); tiny named at full gets ci's."""
    from tutorial_lib.pipeline import lora_for, sft_settings

    monkeypatch.setenv("TUTORIAL_SCALE", "ci")
    monkeypatch.setenv("TUTORIAL_MODEL", "google/gemma-3-1b-it")
    preset = presets.get_preset()
    assert preset == presets.replace(presets.PRESETS["small"], model="google/gemma-3-1b-it")
    assert "settings of 'small'" in presets.describe(preset)
    assert lora_for(preset) == presets.DEFAULT_LORA
    sft = sft_settings("tictactoe", preset)
    assert sft.learning_rate == 3e-4 and sft.max_steps is not None
    tiny_sft = sft_settings("tictactoe", presets.PRESETS["ci"])
    assert tiny_sft.learning_rate == 3e-3 and tiny_sft.max_steps is None
    monkeypatch.setenv("TUTORIAL_SCALE", "full")
    monkeypatch.setenv("TUTORIAL_MODEL", "tiny")
    assert presets.get_preset() == presets.PRESETS["ci"]
    assert lora_for(presets.get_preset()) is None


def test_default_follows_the_hardware(monkeypatch):
    monkeypatch.delenv("TUTORIAL_SCALE", raising=False)
    monkeypatch.setattr(presets, "has_accelerator", lambda: False)
    assert presets.scale_name() == "ci"
    monkeypatch.setattr(presets, "has_accelerator", lambda: True)
    assert presets.scale_name() == "gpu"  # a chapter opened on a GPU: minutes, not full's hours


def test_bad_scale_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TUTORIAL_SCALE", "huge")
    with pytest.raises(ValueError, match="use one of ci, small, gpu, full"):
        presets.get_preset()


@pytest.mark.parametrize("scale", presets.SCALES)
def test_every_rl_setting_of_every_preset_is_valid(scale):
    from tutorial_lib.pipeline import sft_dir
    from tutorial_lib.presets import rl_settings

    preset = presets.PRESETS[scale]
    from tutorial_lib.rl.grpo import GRPOSettings
    from tutorial_lib.rl.ppo import PPOSettings
    from tutorial_lib.rl.reinforce import ReinforceSettings

    for game, settings in preset.games.items():
        # typed, so a preset's settings were validated when the preset was built
        for field_name, settings_class in (("reinforce", ReinforceSettings), ("ppo", PPOSettings), ("grpo", GRPOSettings)):
            assert getattr(settings, field_name) is None or isinstance(getattr(settings, field_name), settings_class)
        if settings.reinforce:
            assert rl_settings(game, preset).iterations == settings.reinforce.iterations
        if settings.ppo:
            ppo = rl_settings(game, preset, "ppo")
            # the game's options, the algorithm's own on top
            assert ppo.env_options == {**settings.env_options, **settings.ppo.env_options}
    with pytest.raises(ValueError, match="unknown RL algorithm"):
        rl_settings("math", preset, "a2c")
    # RL settings are not part of the SFT cache key: changing them keeps chapter 4's checkpoint
    changed = presets.replace(preset, games={**preset.games, "math": presets.replace(preset.games["math"], ppo=None)})
    assert sft_dir("math", changed) == sft_dir("math", preset)


def test_the_presets_recovery_data_reaches_the_expert_data(tmp_path, monkeypatch):
    from tutorial_lib.pipeline import expert_data_path, make_expert_data

    monkeypatch.setenv("TUTORIAL_CACHE", str(tmp_path))
    preset = presets.PRESETS["ci"]
    cw = preset.games["cookingworld"]
    assert cw.expert_mistake_rate > 0  # chapter 3 shows it, chapter 4 measures it
    small = presets.replace(cw, expert_episodes=3, expert_mistake_rate=0.5,
                            env_options=dict(num_locations=1, num_ingredients=1, num_distractor_items=1))
    changed = presets.replace(preset, games={**preset.games, "cookingworld": small})
    examples = make_expert_data("cookingworld", changed)
    assert any(e["mistakes_before"] for e in examples)
    # the rate is part of the data's cache key, so a changed rate never reuses old data
    clean = presets.replace(changed, games={**preset.games, "cookingworld": presets.replace(small, expert_mistake_rate=0.0)})
    assert expert_data_path("cookingworld", clean) != expert_data_path("cookingworld", changed)


def test_counterfactual_recipes_setting_reaches_the_cookingworld_data(tmp_path, monkeypatch):
    from tutorial_lib.data.expert_data import is_recipe_step
    from tutorial_lib.pipeline import expert_data_path, make_expert_data

    monkeypatch.setenv("TUTORIAL_CACHE", str(tmp_path))
    preset = presets.PRESETS["ci"]
    assert preset.games["cookingworld"].counterfactual_recipes  # chapter 3 shows it, chapter 4 measures it
    small = presets.replace(preset.games["cookingworld"], expert_episodes=4, expert_mistake_rate=0.0,
                            env_options=dict(num_locations=1, num_ingredients=1, num_distractor_items=1))
    on = presets.replace(preset, games={**preset.games, "cookingworld": small})
    off = presets.replace(preset, games={**preset.games,
                                         "cookingworld": presets.replace(small, counterfactual_recipes=False)})
    rewritten, plain = make_expert_data("cookingworld", on), make_expert_data("cookingworld", off)
    assert any(e["recipe_swap"] for e in rewritten) and not any("recipe_swap" in e for e in plain)
    # the same episodes and steps, the cut and cook steps repeated: only words change
    copies = small.recipe_step_copies
    assert copies > 0
    expected = [(e["seed"], e["turn"]) for e in plain
                for _ in range(1 + copies * is_recipe_step(e["completion"]))]
    assert [(e["seed"], e["turn"]) for e in rewritten] == expected
    assert expert_data_path("cookingworld", on) != expert_data_path("cookingworld", off)


def test_chapter_9_runs_a_pretrained_model_at_every_scale(monkeypatch):
    """At ci chapter 9 takes the small preset's settings with CI-sized counts; with a pretrained
    model it takes the preset as it is."""
    from tutorial_lib.pipeline import lora_for, sft_settings

    ci = presets.pretrained_preset(presets.PRESETS["ci"])
    small = presets.PRESETS["small"]
    assert ci.model == presets.DEFAULT_OFFLINE_MODEL and lora_for(ci) == presets.DEFAULT_LORA
    assert sft_settings("guess_the_number", ci).max_steps < sft_settings("guess_the_number", small).max_steps
    assert ci.game("guess_the_number").reinforce.iterations < small.game("guess_the_number").reinforce.iterations
    assert ci.game("guess_the_number").reinforce.learning_rate == small.game("guess_the_number").reinforce.learning_rate
    for game in small.games:  # written out in the table: small's recipes, smaller counts
        assert sft_settings(game, ci).learning_rate == sft_settings(game, small).learning_rate
        assert ci.game(game).env_options == small.game(game).env_options
        assert ci.game(game).eval_episodes <= small.game(game).eval_episodes
    assert presets.pretrained_preset(small) is small
    assert presets.pretrained_preset(presets.PRESETS["full"]) is presets.PRESETS["full"]
    assert presets.pretrained_preset(presets.PRESETS["gpu"]) is presets.PRESETS["gpu"]


def test_gpu_and_full_presets_size_training_to_the_device():
    """A GPU reader's default is small's model and recipes with more games; full and gpu choose
    their micro-batches from the card's memory, keeping each recipe's examples per step."""
    from tutorial_lib.pipeline import sft_settings
    from tutorial_lib.presets import rl_settings

    gpu, small, full = presets.PRESETS["gpu"], presets.PRESETS["small"], presets.PRESETS["full"]
    assert gpu.model == small.model == presets.DEFAULT_OFFLINE_MODEL and gpu.lora == small.lora
    for game in ("tictactoe", "guess_the_number", "math", "cookingworld"):
        assert sft_settings(game, gpu).size_to_device and sft_settings(game, full).size_to_device
        assert not sft_settings(game, small).size_to_device  # a CPU keeps its written settings
        assert sft_settings(game, gpu).learning_rate == sft_settings(game, small).learning_rate
        for algo in ("reinforce", "ppo"):
            if getattr(gpu.game(game), algo) is not None:
                assert rl_settings(game, gpu, algo).size_to_device and rl_settings(game, full, algo).size_to_device
                assert rl_settings(game, gpu, algo).learning_rate == rl_settings(game, small, algo).learning_rate
                assert rl_settings(game, gpu, algo).env_options == rl_settings(game, small, algo).env_options
    assert sft_settings("math", full).batch_size * sft_settings("math", full).gradient_accumulation_steps == 64


def test_game_settings_are_keyword_only():
    """``GameSettings(dict(...), 500, dict(...), 100)`` read as anything; each field is named."""
    from tutorial_lib.presets import GameSettings

    with pytest.raises(TypeError):
        GameSettings(dict(preset="easy"), 100)
    assert GameSettings(env_options=dict(preset="easy"), eval_episodes=7).eval_episodes == 7


def test_an_sft_override_that_names_no_setting_is_an_error_where_the_preset_is_written():
    with pytest.raises(ValueError, match="SFTSettings has no field learning_rat"):
        presets.GameSettings(sft={"learning_rat": 3e-3})
    with pytest.raises(ValueError, match="SFTSettings has no field epoch"):
        presets.replace(presets.PRESETS["ci"], sft={"epoch": 2})
    assert presets.GameSettings(sft={"learning_rate": 3e-3}).sft == {"learning_rate": 3e-3}


def test_rl_settings_apply_a_runs_changes_in_one_place():
    from tutorial_lib.presets import rl_settings

    preset = presets.PRESETS["ci"]
    written = rl_settings("tictactoe", preset)
    assert rl_settings("tictactoe", preset, iterations=None, learning_rate=None) == written  # None keeps
    changed = rl_settings("tictactoe", preset, iterations=3, seed=7, env_options={"agent_mark": "x"})
    assert (changed.iterations, changed.seed) == (3, 7)
    # options are added to the preset's, not put in their place
    assert changed.env_options == {**written.env_options, "agent_mark": "x"}
    # fewer turns than games side by side bring the games down with them, unless named too
    assert rl_settings("tictactoe", preset, turns_per_iteration=4).num_envs == 4
    assert rl_settings("tictactoe", preset, turns_per_iteration=4, num_envs=2).num_envs == 2
    ppo = rl_settings("math", preset, "ppo", turns_per_iteration=4)
    assert (ppo.num_envs, ppo.minibatch_turns) == (min(4, ppo.num_envs), min(4, ppo.minibatch_turns))
    # GRPO's loop names its counts otherwise
    grpo = rl_settings("math", preset, "grpo", iterations=5, save_every=2)
    assert (grpo.steps, grpo.save_steps) == (5, 2)
    with pytest.raises(ValueError, match="has no setting turns_per_iteration"):
        rl_settings("math", preset, "grpo", turns_per_iteration=4)
    with pytest.raises(ValueError, match="has no setting clip_range"):
        rl_settings("tictactoe", preset, clip_range=0.1)
    with pytest.raises(ValueError, match="iterations must be at least 1"):  # the settings' own checks run
        rl_settings("tictactoe", preset, iterations=0)


def test_a_shorter_or_longer_run_decays_over_the_same_share_of_it():
    from dataclasses import replace

    from tutorial_lib.presets import rl_settings, scaled_decay
    from tutorial_lib.rl.reinforce import ReinforceSettings

    wsd = ReinforceSettings(iterations=120, lr_schedule="warmup_stable_decay", decay_iterations=30, warmup_iterations=2)
    assert [scaled_decay(wsd, n) for n in (120, 240, 12, 3, 1)] == [30, 60, 3, 1, 1]
    assert scaled_decay(replace(wsd, warmup_iterations=0), 1) == 1
    preset = presets.PRESETS["ci"]
    written = rl_settings("tictactoe", preset)  # chapter 5's recipe decays over its last quarter
    assert written.lr_schedule == "warmup_stable_decay"
    short = rl_settings("tictactoe", preset, iterations=10)  # chapter 5's ablation: a valid schedule, not an error
    assert short.decay_iterations == scaled_decay(written, 10) >= 1
    assert rl_settings("tictactoe", preset, iterations=10, decay_iterations=4).decay_iterations == 4  # named: kept
    with pytest.raises(ValueError, match="iterations must be at least 1"):  # the count's own error, not the schedule's
        rl_settings("tictactoe", preset, iterations=0)
    assert rl_settings("tictactoe", preset, "ppo", iterations=10).lr_schedule == "constant"  # untouched


def test_a_changed_sft_recipe_gets_checkpoints_of_its_own_and_leaves_the_rest(tmp_path, monkeypatch):
    from tutorial_lib.pipeline import expert_data_path, sft_dir, sft_settings, with_sft_changes
    from tutorial_lib.presets import rl_settings

    monkeypatch.setenv("TUTORIAL_CACHE", str(tmp_path))
    ci = presets.get_preset("ci")
    shorter = with_sft_changes(ci, "tictactoe", epochs=30)
    assert sft_settings("tictactoe", shorter).epochs == 30 and sft_settings("tictactoe", ci).epochs == 45
    assert sft_settings("tictactoe", shorter).learning_rate == sft_settings("tictactoe", ci).learning_rate
    assert sft_dir("tictactoe", shorter) != sft_dir("tictactoe", ci)  # never loads the preset's checkpoint
    assert expert_data_path("tictactoe", shorter) == expert_data_path("tictactoe", ci)  # the same data
    assert rl_settings("tictactoe", shorter) == rl_settings("tictactoe", ci)
    assert sft_dir("math", shorter) == sft_dir("math", ci)  # other games untouched
    with pytest.raises(ValueError, match="SFTSettings has no field epoch"):
        with_sft_changes(ci, "tictactoe", epoch=30)
