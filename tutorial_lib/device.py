"""Where tensors live: CUDA, TPU (torch_xla), Apple MPS or CPU, decided in one place (chapter 2).

Everything else in the library asks this module instead of calling ``torch.cuda`` itself, so that
the same notebook runs on a laptop, a Colab GPU and a TPU VM.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache

import torch

KINDS = ("cuda", "xla", "mps", "cpu")


def xla_available() -> bool:
    """True when torch_xla is installed and can see a TPU (or another XLA device)."""
    if importlib.util.find_spec("torch_xla") is None:
        return False
    try:
        import torch_xla.core.xla_model as xm

        xm.xla_device()
        return True
    except Exception:  # torch_xla installed but no XLA device
        return False


@lru_cache(maxsize=1)
def device_kind() -> str:
    """The best accelerator present: ``"cuda"``, ``"xla"``, ``"mps"`` or ``"cpu"``."""
    if torch.cuda.is_available():
        return "cuda"
    if xla_available():
        return "xla"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def get_device(kind: str | None = None) -> torch.device:
    """A ``torch.device`` for ``kind`` (default: :func:`device_kind`)."""
    kind = kind or device_kind()
    if kind not in KINDS:
        raise ValueError(f"unknown device kind {kind!r}; choose one of {', '.join(KINDS)}")
    if kind == "xla":
        import torch_xla.core.xla_model as xm

        return xm.xla_device()
    return torch.device(kind)


def has_accelerator() -> bool:
    return device_kind() != "cpu"


def default_dtype(kind: str | None = None) -> torch.dtype:
    """bfloat16 where the hardware computes in it natively (recent CUDA GPUs, TPUs), else float32.

    CPU stays in float32: bfloat16 matmuls are slower there and the tiny model is small anyway.
    """
    kind = kind or device_kind()
    if kind == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    if kind == "xla":
        return torch.bfloat16
    return torch.float32


def can_load_in_4bit() -> tuple[bool, str]:
    """Whether 4-bit (bitsandbytes) loading is possible here, and if not, why."""
    if device_kind() != "cuda":
        return False, (
            f"4-bit quantisation needs bitsandbytes on a CUDA GPU; this machine has {device_kind()}. "
            "Use LoRA without load_in_4bit here"
        )
    if importlib.util.find_spec("bitsandbytes") is None:
        return False, "bitsandbytes is not installed: pip install 'tutorial_lib[gpu]'"
    return True, ""
