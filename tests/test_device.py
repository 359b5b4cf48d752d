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


def test_peak_memory_sees_a_large_temporary_allocation():
    with device.PeakMemory(interval=0.001) as memory:
        block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
        block += 1
        import time

        time.sleep(0.05)  # let the sampler see it
        del block
    assert 48 <= memory.mib < 512
    assert "CPU" in memory.what
    with device.PeakMemory() as idle:
        pass
    assert idle.mib < 48
