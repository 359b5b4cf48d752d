import time

import pytest
import torch

from tutorial_lib.runtime import device


def test_cpu_defaults_and_bad_kind():
    assert device.get_device("cpu") == torch.device("cpu")
    assert device.default_dtype("cpu") == torch.float32
    with pytest.raises(ValueError, match="cuda, xla, mps, cpu"):
        device.get_device("gpu")


def test_xla_is_bfloat16_and_chosen_by_itself_only_on_a_tpu(monkeypatch):
    # XLA's CPU device (PJRT_DEVICE=CPU) is the XLA tests' device: float32, like the CPU it is compared
    # with, and never picked over the plain CPU by device_kind()
    for hardware, dtype, chosen in (("TPU", torch.bfloat16, True), ("CPU", torch.float32, False),
                                    (None, torch.float32, False)):
        monkeypatch.setattr(device, "xla_hardware", lambda hardware=hardware: hardware)
        assert device.default_dtype("xla") == dtype
        assert device.xla_available() is chosen


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
    cuda = device.device_kind() == "cuda"  # there it counts the card's tensors, not the process's memory
    with device.PeakMemory(interval=0.001) as memory:
        block = torch.ones(64 * 2**20 // 4, device="cuda" if cuda else "cpu")  # 64 MiB, touched
        block += 1
        time.sleep(0.05)  # let the sampler see it
        del block
    assert 48 <= memory.mib < 512
    assert ("CUDA" if cuda else "CPU") in memory.what
    with device.PeakMemory() as idle:
        pass
    assert idle.mib < 48


@pytest.mark.skipif(device.device_kind() != "cpu", reason="the CPU path samples resident memory")
def test_a_second_measurement_in_the_same_process_sees_the_same_growth():
    """Chapter 7 measures three algorithms one after the other. Memory the first run freed stays
    resident unless handed back, and the second run would reuse it and report almost no growth."""
    def churn():
        blocks = [torch.ones(16_000) for _ in range(3000)]  # 64 KB each (~190 MB), below mmap's threshold
        time.sleep(0.1)  # let the sampler see them
        return len(blocks)

    with device.PeakMemory(interval=0.005) as first:
        churn()
    with device.PeakMemory(interval=0.005) as second:
        churn()
    assert first.mib > 120 and second.mib > 0.7 * first.mib, (first.mib, second.mib)


def test_batches_are_padded_to_a_few_widths_on_xla_only():
    assert device.shape_multiple(torch.device("xla")) == device.XLA_SHAPE_MULTIPLE > 1
    assert device.shape_multiple("cpu") == 1 and device.shape_multiple(torch.device("cuda")) == 1
    device.end_of_step("cpu")  # nothing to cut off the XLA device: a no-op that must not import torch_xla
