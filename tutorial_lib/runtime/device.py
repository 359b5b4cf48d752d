"""Where tensors live: CUDA, TPU (torch_xla), Apple MPS or CPU, decided in one place (chapter 2).

Everything else in the library asks this module instead of calling ``torch.cuda`` itself, so that
the same notebook runs on a laptop, a Colab GPU and a TPU VM.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache

import torch

KINDS = ("cuda", "xla", "mps", "cpu")


def xla_hardware() -> str | None:
    """The hardware behind torch_xla's device: ``"TPU"``, ``"CPU"`` (XLA's CPU device), ``"CUDA"``...;
    ``None`` where torch_xla is not installed or cannot start. ``import torch_xla`` sets
    ``PJRT_DEVICE`` when it is unset: TPU where libtpu sees chips, else CPU (torch_xla's PJRT guide)."""
    if importlib.util.find_spec("torch_xla") is None:
        return None
    try:
        import torch_xla  # noqa: F401  (chooses PJRT_DEVICE when it is unset)
        import torch_xla.runtime as xr

        return xr.device_type()
    except Exception:  # installed, but broken or without a runtime
        return None


def xla_available() -> bool:
    """True when torch_xla runs on an accelerator (a TPU). XLA's CPU device is no accelerator: an
    environment with torch_xla on a plain CPU must not choose it (nor the ``gpu`` preset) by itself,
    so it is used only when asked for by name, ``get_device("xla")``, as the XLA tests do."""
    return xla_hardware() not in (None, "CPU")


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
        import torch_xla

        return torch_xla.device()  # xm.xla_device() is deprecated in torch_xla 2.9
    return torch.device(kind)


#: on XLA, the widths a batch's tensors are padded up to a multiple of (its sequences and its
#: actions): XLA compiles one graph per shape, so a width that followed each batch's longest turn
#: would compile a new graph nearly every update; multiples of 16 leave a few shapes for a game's
#: turns (torch_xla's guide: pad to a few fixed sizes) and little padding on a short action
XLA_SHAPE_MULTIPLE = 16


def shape_multiple(device: torch.device | str) -> int:
    """What a batch's widths are rounded up to on ``device``: :data:`XLA_SHAPE_MULTIPLE` on XLA, 1
    (no padding beyond the longest row) elsewhere, where every shape runs without compiling."""
    return XLA_SHAPE_MULTIPLE if torch.device(device).type == "xla" else 1


def end_of_step(device: torch.device | str) -> None:
    """On XLA, cut the traced graph after an optimiser step (``torch_xla.sync()``): the step's
    updates are computed now, and the next step traces a graph of its own. Without it the graph
    of every step so far grows into the next, each a new graph to compile. Nothing elsewhere."""
    if torch.device(device).type == "xla":
        import torch_xla

        torch_xla.sync()


def cpu_name() -> str:
    """The CPU's model name (``"AMD EPYC"``, ``"Intel(R) Xeon(R) ..."``), for records: floating point
    differs between CPUs, so a recorded number says which one computed it."""
    import platform

    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_bfloat16_flags() -> list[str]:
    """This CPU's flags for bfloat16 arithmetic in hardware (``avx512_bf16``, ``amx_bf16``); empty
    where it is emulated (then autocast to bfloat16 is much slower than float32) or unknown."""
    try:
        with open("/proc/cpuinfo") as info:
            flags = set(info.read().split())
    except OSError:
        return []
    return [flag for flag in ("avx512_bf16", "amx_bf16") if flag in flags]


def has_accelerator() -> bool:
    return device_kind() != "cpu"


def default_dtype(kind: str | None = None) -> torch.dtype:
    """bfloat16 where the hardware computes in it natively (recent CUDA GPUs, TPUs), else float32.

    CPU stays in float32: bfloat16 matmuls are slower there and the tiny model is small anyway; so
    does XLA's CPU device, whose results are compared with the CPU's in float32.
    """
    kind = kind or device_kind()
    if kind == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    if kind == "xla" and xla_hardware() == "TPU":
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


class PeakMemory:
    """Peak memory used inside a ``with`` block, in MiB above what was in use when it began
    (chapter 7 compares algorithms with it).

        with PeakMemory() as memory:
            train(...)
        memory.mib, memory.what     # e.g. 412.0, "CPU resident memory (sampled every 20 ms)"

    On CUDA it is the allocator's own peak (``torch.cuda.max_memory_allocated``): exact, and only
    tensors. On a CPU there is no such counter, so a thread samples the process's resident memory
    (RSS) every ``interval`` seconds: everything the process touches (Python objects, the JVMs of
    CookingWorld are other processes and not counted), and a peak shorter than the interval can be
    missed.
    """

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.mib = 0.0
        self.what = ""

    def __enter__(self):
        import threading

        self._cuda = device_kind() == "cuda"
        if self._cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._start = torch.cuda.memory_allocated()
            self.what = "CUDA memory allocated by tensors"
            return self
        import psutil

        _release_freed_memory()  # else memory an earlier run freed but kept would hide this run's growth
        process = psutil.Process()
        self._start = self._peak = process.memory_info().rss
        self._stop = threading.Event()

        def sample() -> None:
            while not self._stop.wait(self.interval):
                self._peak = max(self._peak, process.memory_info().rss)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        self.what = f"CPU resident memory (sampled every {self.interval * 1000:.0f} ms)"
        return self

    def __exit__(self, *exc_info) -> None:
        if self._cuda:
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        else:
            self._stop.set()
            self._thread.join()
            import psutil

            peak = max(self._peak, psutil.Process().memory_info().rss)
        self.mib = (peak - self._start) / 2**20


def _release_freed_memory() -> None:
    """Hand memory that Python and torch have freed back to the operating system, where the C
    library allows it (glibc's ``malloc_trim``). Without it, a second measurement in the same
    process starts with the first run's freed-but-kept pages already resident, and reuses them:
    it would report far less growth than the same run in a fresh process."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (macOS, musl): measurements stay as they are
        pass
