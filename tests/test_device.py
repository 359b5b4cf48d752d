import pytest
import torch

from tutorial_lib import device


def test_cpu_defaults_and_bad_kind():
    assert device.get_device("cpu") == torch.device("cpu")
    assert device.default_dtype("cpu") == torch.float32
    assert device.default_dtype("xla") == torch.bfloat16
    with pytest.raises(ValueError, match="cuda, xla, mps, cpu"):
        device.get_device("gpu")


def test_four_bit_is_refused_off_cuda_with_a_reason(monkeypatch):
    device.device_kind.cache_clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device, "xla_available", lambda: False)
    try:
        possible, why = device.can_load_in_4bit()
        assert not possible and "CUDA" in why
    finally:
        device.device_kind.cache_clear()
