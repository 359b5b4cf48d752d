"""torch's CPU thread count: fixed for the whole process, so a number never depends on the load
(all chapters; the set-up page explains it).

**What is reproducible.** On one machine, with one thread count, the same seed gives the same
bytes: two runs train the same weights and play the same games (``tests/test_cpu_threads.py`` runs
the same training twice in fresh processes and compares hashes). Across thread counts and across
CPUs it does not hold: a sum split over two threads is added in another order than over one, and
another CPU (or another kernel set, ``ATEN_CPU_CAPABILITY=avx2``) rounds differently. On some CPUs
five training steps of the tiny model already end in different weights on one thread and on two.
So the count is chosen once, from settings and never from the load, and kept:

* ``TUTORIAL_THREADS=<n>`` fixes it to ``n``; ``OMP_NUM_THREADS`` is left as the user set it;
* otherwise torch's own count (one thread per core) stays;
* ``make book`` runs two chapters at a time and gives each kernel ``cores // jobs`` threads
  (:mod:`tutorial_lib.book_tools.book_execute`), the same in every build on that machine, idle or busy.

**A busy machine.** PyTorch's threads meet at the end of every parallel region, and while one waits
for the others it spins before it sleeps (libgomp, which torch's Linux wheels use, spins ~300,000
times). Beside another busy process that is slow: the thread that should run has lost its core and
its siblings burn the rest waiting for it. On the book's 2-core machine one tiny-model training
step took 2.8-3.8x its idle time with 2 threads beside one busy thread, and 1.7x with one thread
(``benchmarks/results/threads_cpu.md``). ``TUTORIAL_THREADS=1`` is the reproducible remedy.
``TUTORIAL_THREADS=adapt`` trades reproducibility for speed: the library's long loops (SFT steps,
game turns, RL iterations) call :func:`fit_threads`, which at most every ``CHECK_EVERY`` seconds
looks at how many cores *other* processes kept busy since its last look and sets torch's count to
the cores left over. The results then depend on what else ran, on CPUs where the count changes the
sums; every chapter's first line says ``threads=adapt`` when it is on.
"""

from __future__ import annotations

import os
import time

import psutil
import torch

from tutorial_lib.runtime.device import device_kind

#: seconds between two looks at the machine's load (one look costs about a millisecond)
CHECK_EVERY = 2.0
#: a look this long after the last one says little about the load now (a notebook sat between
#: cells): it starts a new window instead of deciding
STALE_AFTER = 30.0


def threads_for(cores: int, busy_elsewhere: float) -> int:
    """The thread count for ``cores`` usable cores when other processes keep ``busy_elsewhere``
    cores busy: the cores left over, rounded to the nearest whole core, at least 1.

    Beside a neighbour that holds one core of two, that is 1; a neighbour that used a quarter of a
    core leaves the count at 2. (Rounding, not flooring: a neighbour squeezed by our own spinning
    threads shows as ~0.7 of a core, and must still count as one.)
    """
    if cores < 1:
        raise ValueError(f"cores must be at least 1; got {cores}")
    return max(1, min(cores, round(cores - max(0.0, busy_elsewhere))))


def _usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows: no affinity masks
        return list(range(psutil.cpu_count() or 1))


def _busy_seconds(cpus: list[int]) -> float:
    """Seconds the cores ``cpus`` spent doing anything (not idle, not waiting for a disk) so far."""
    per_cpu = psutil.cpu_times(percpu=True)
    total = 0.0
    for index in cpus:
        if index < len(per_cpu):
            times = per_cpu[index]
            total += sum(times) - times.idle - getattr(times, "iowait", 0.0)
    return total


def _own_seconds(process: psutil.Process) -> float:
    """CPU seconds of this process (all its threads) so far. Child processes are not counted as
    ours: one that computes while torch does competes for the cores like any neighbour. (The JVMs
    of CookingWorld mostly work while this process waits for them, and show as a small load.)"""
    times = process.cpu_times()
    return times.user + times.system


class LoadWatcher:
    """How many cores other processes kept busy between two calls of :meth:`busy_elsewhere`."""

    def __init__(self) -> None:
        self.cpus = _usable_cpus()
        self._process = psutil.Process()
        self._last = self._snapshot()

    def _snapshot(self) -> tuple[float, float, float]:
        return time.monotonic(), _busy_seconds(self.cpus), _own_seconds(self._process)

    def busy_elsewhere(self) -> float:
        """Cores kept busy by other processes since the last call (or since construction)."""
        (t0, busy0, own0), (t1, busy1, own1) = self._last, self._snapshot()
        self._last = (t1, busy1, own1)
        if t1 - t0 <= 0:
            return 0.0
        return max(0.0, ((busy1 - busy0) - (own1 - own0)) / (t1 - t0))


class _Governor:
    """The process's one watcher, started at the first look, and the count torch started with."""

    def __init__(self) -> None:
        self.most = _STARTING_THREADS
        self.watcher = LoadWatcher()
        self.checked_at = time.monotonic()
        self.decisions = 0  # how many times the count changed (tests and benchmarks read it)


_GOVERNOR: _Governor | None = None
#: torch's count when this module was first imported: the ceiling (a governor made later, after an
#: earlier one lowered the count, must not take the lowered count for the machine's)
_STARTING_THREADS = torch.get_num_threads()


def _setting() -> str:
    return os.environ.get("TUTORIAL_THREADS", "").strip().lower()


def _fixed_count() -> int | None:
    """The count ``TUTORIAL_THREADS=<n>`` fixes, or ``None`` (unset, or ``adapt``)."""
    setting = _setting()
    if setting in ("", "adapt"):
        return None
    count = int(setting) if setting.isdigit() else 0
    if count < 1:
        raise ValueError(
            f"TUTORIAL_THREADS must be a whole number >= 1, or 'adapt' to follow the load; got {setting!r}"
        )
    return count


def mode() -> str:
    """``"fixed"`` (the default: the count never changes), or ``"adapt"`` (``TUTORIAL_THREADS=adapt``
    without ``OMP_NUM_THREADS``: the count follows the load)."""
    adapt = _setting() == "adapt" and not os.environ.get("OMP_NUM_THREADS")
    return "adapt" if adapt else "fixed"


def fit_threads(now: bool = False) -> int:
    """Apply the process's thread setting; under ``TUTORIAL_THREADS=adapt``, fit the count to the
    cores other processes leave free. Return the count.

    Cheap enough for any loop. By default it changes nothing (torch's count, or the one
    ``TUTORIAL_THREADS=<n>`` names, which is applied here). With ``adapt``, between looks (every
    ``CHECK_EVERY`` seconds, or at once with ``now=True``) it only reads the clock; on a GPU or TPU
    it does nothing.
    """
    global _GOVERNOR

    fixed = _fixed_count()
    if fixed is not None:
        if torch.get_num_threads() != fixed:
            torch.set_num_threads(fixed)
        return fixed
    if mode() == "fixed" or device_kind() != "cpu":
        return torch.get_num_threads()
    if _GOVERNOR is None:  # the first look: a window starts, the next look decides
        _GOVERNOR = _Governor()
        return torch.get_num_threads()
    governor = _GOVERNOR
    clock = time.monotonic()
    if clock - governor.checked_at > STALE_AFTER:  # nothing ran for a while: start a fresh window
        governor.watcher.busy_elsewhere()
        governor.checked_at = clock
        return torch.get_num_threads()
    if not now and clock - governor.checked_at < CHECK_EVERY:
        return torch.get_num_threads()
    governor.checked_at = clock
    cores = min(governor.most, len(governor.watcher.cpus))
    wanted = threads_for(cores, governor.watcher.busy_elsewhere())
    if wanted != torch.get_num_threads():
        torch.set_num_threads(wanted)
        governor.decisions += 1
    return wanted


def describe_threads() -> str:
    """``"threads=<n>"``, or ``"threads=adapt"``: what the chapters' first line says about threads."""
    fixed = _fixed_count()
    if fixed is not None:
        return f"threads={fixed}"
    return "threads=adapt" if mode() == "adapt" else f"threads={torch.get_num_threads()}"


def trainer_callback():
    """A ``transformers.TrainerCallback`` that calls :func:`fit_threads` before every optimizer step
    (TRL's SFT and GRPO trainers run their own loops)."""
    from transformers import TrainerCallback

    class FitThreads(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            fit_threads()

    return FitThreads()


def _apply_fixed_count() -> None:
    """``TUTORIAL_THREADS=<n>`` applies as soon as the library is imported, before anything computes
    (a bad value raises later, with its message, from :func:`fit_threads` or :func:`describe_threads`)."""
    try:
        fixed = _fixed_count()
    except ValueError:
        return
    if fixed is not None and torch.get_num_threads() != fixed:
        torch.set_num_threads(fixed)


_apply_fixed_count()
