import pytest

from tutorial_lib import presets


def test_env_var_selects_preset_and_model(monkeypatch):
    monkeypatch.setenv("TUTORIAL_SCALE", "full")
    assert presets.get_preset().model == presets.DEFAULT_HUB_MODEL
    monkeypatch.setenv("TUTORIAL_SCALE", "ci")
    monkeypatch.setenv("TUTORIAL_MODEL", "google/gemma-3-1b-it")
    assert presets.get_preset() == presets.PRESETS["ci"].__class__(
        **{**presets.PRESETS["ci"].__dict__, "model": "google/gemma-3-1b-it"}
    )
    assert "preset=ci" in presets.describe() and "model=google/gemma-3-1b-it" in presets.describe()


def test_default_follows_the_hardware(monkeypatch):
    monkeypatch.delenv("TUTORIAL_SCALE", raising=False)
    monkeypatch.setattr(presets, "has_accelerator", lambda: False)
    assert presets.scale_name() == "ci"
    monkeypatch.setattr(presets, "has_accelerator", lambda: True)
    assert presets.scale_name() == "full"


def test_bad_scale_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TUTORIAL_SCALE", "huge")
    with pytest.raises(ValueError, match="use one of ci, full"):
        presets.get_preset()
