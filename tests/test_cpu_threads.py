"""torch's CPU thread count (tutorial_lib.runtime.cpu_threads): fixed per process by default, so a number
never depends on the load; fitted to the load only under ``TUTORIAL_THREADS=adapt``.

The tests of the opt-in governor measure the machine: they compare against the load they find
before they start, and skip, saying why, on a machine too busy to show what they look for."""

import os
import subprocess
import sys
import time

import pytest
import torch

from tutorial_lib.runtime import cpu_threads
from tutorial_lib.runtime.cpu_threads import LoadWatcher, fit_threads, threads_for

SPIN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"


def start_neighbour(seconds: float) -> subprocess.Popen:
    """A process that keeps one core busy for ``seconds``."""
    process = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)])
    time.sleep(0.3)  # let it start spinning
    return process


def spin_here(seconds: float) -> None:
    end = time.time() + seconds
    while time.time() < end:
        pass


@pytest.fixture
def fresh_governor(monkeypatch):
    """``TUTORIAL_THREADS=adapt``, a governor that has not looked yet, and torch's thread count
    restored afterwards."""
    monkeypatch.setenv("TUTORIAL_THREADS", "adapt")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    monkeypatch.setattr(cpu_threads, "_GOVERNOR", None)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    "cores, busy, expected",
    [(2, 0.0, 2), (2, 0.3, 2), (2, 0.7, 1), (2, 1.0, 1), (2, 2.5, 1), (8, 3.0, 5), (4, -0.2, 4), (1, 0.0, 1)],
)
def test_threads_are_the_cores_left_over(cores, busy, expected):
    assert threads_for(cores, busy) == expected


def test_threads_need_a_core():
    with pytest.raises(ValueError, match="at least 1"):
        threads_for(0, 0.0)


def background_load(seconds: float = 1.0) -> float:
    """Cores other processes keep busy before a test starts its own neighbour (CI and readers'
    machines are not always idle: the tests compare against this, not against zero)."""
    watcher = LoadWatcher()
    time.sleep(seconds)
    return watcher.busy_elsewhere()


#: a machine whose other processes keep more than this many cores busy is too busy to measure
#: a neighbour on: the load itself moves by more than the effect the tests look for
QUIET_ENOUGH = 0.3


def skip_if_busy(background: float) -> None:
    cores = len(os.sched_getaffinity(0))
    if cores < 2 or background > QUIET_ENOUGH:
        pytest.skip(f"other processes keep {background:.1f} of {cores} cores busy: too busy to tell a "
                    "neighbour this test starts from the load already there")


@pytest.mark.alone
def test_a_busy_neighbour_is_seen_and_our_own_work_is_not():
    background = background_load()
    skip_if_busy(background)
    watcher = LoadWatcher()
    spin_here(1.0)  # this process busy: not someone else's load
    assert watcher.busy_elsewhere() < background + 0.5
    neighbour = start_neighbour(2.0)
    watcher.busy_elsewhere()  # a window that starts with the neighbour running
    time.sleep(1.0)
    seen = watcher.busy_elsewhere()
    neighbour.kill()  # not left spinning into the next test's measurements
    neighbour.wait()
    assert seen > background + 0.6


@pytest.mark.alone
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: there is nothing to give up")
def test_fit_threads_gives_a_core_to_a_busy_neighbour_and_takes_it_back(fresh_governor):
    most = cpu_threads._STARTING_THREADS  # the ceiling, whatever an earlier test left the count at
    cores = min(most, len(os.sched_getaffinity(0)))
    background = background_load()
    skip_if_busy(background)
    alone, beside = threads_for(cores, background), threads_for(cores, background + 1.0)
    if beside == alone:
        pytest.skip(f"{cores} usable cores, {background:.1f} busy elsewhere: one more busy core changes no count")
    fit_threads(now=True)  # the first look starts the window
    neighbour = start_neighbour(1.5)
    fit_threads(now=True)  # restart the window with the neighbour running
    time.sleep(1.0)
    assert fit_threads(now=True) == beside
    assert torch.get_num_threads() < most
    neighbour.wait()  # the neighbour stops
    fit_threads(now=True)
    time.sleep(0.5)
    assert fit_threads(now=True) == alone


def test_a_count_the_user_fixed_is_kept(fresh_governor, monkeypatch):
    monkeypatch.setenv("TUTORIAL_THREADS", "1")
    assert fit_threads(now=True) == 1 and torch.get_num_threads() == 1
    assert cpu_threads.describe_threads() == "threads=1"
    monkeypatch.setenv("TUTORIAL_THREADS", "many")
    with pytest.raises(ValueError, match="TUTORIAL_THREADS"):
        fit_threads()
    monkeypatch.setenv("TUTORIAL_THREADS", "adapt")
    assert cpu_threads.mode() == "adapt" and cpu_threads.describe_threads() == "threads=adapt"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_threads.mode() == "fixed"


def test_by_default_the_count_never_follows_the_load(monkeypatch):
    """The default: whatever the load does, the count torch has is the count it keeps, so every
    number a run computes was computed with the same count."""
    monkeypatch.delenv("TUTORIAL_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_threads, "_GOVERNOR", None)
    before = torch.get_num_threads()
    assert cpu_threads.mode() == "fixed" and cpu_threads.describe_threads() == f"threads={before}"
    neighbour = start_neighbour(1.5)
    try:
        counts = []
        for _ in range(3):
            counts.append(fit_threads(now=True))
            time.sleep(0.3)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert counts == [before] * 3 and torch.get_num_threads() == before
    assert cpu_threads._GOVERNOR is None  # nothing looked at the load


TRAIN = """
import hashlib, torch
from tutorial_lib.lm.models import load_policy
torch.manual_seed(0)
model = load_policy("tiny").model
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
generator = torch.Generator().manual_seed(0)
for _ in range(5):
    batch = torch.randint(0, model.config.vocab_size, (16, 160), generator=generator)
    model(input_ids=batch, labels=batch).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(torch.get_num_threads(), hashlib.sha1(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest())
"""


def train_in_a_fresh_process(threads: str) -> tuple[int, str]:
    env = {**os.environ, "TUTORIAL_THREADS": threads}
    env.pop("OMP_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", TRAIN], env=env, capture_output=True, text=True, check=True)
    count, digest = out.stdout.split()[-2:]
    return int(count), digest


@pytest.mark.parametrize("threads", ["1", str(min(2, os.cpu_count() or 1))])
def test_one_thread_setting_gives_the_same_bytes_twice(threads):
    """What the book promises: on one machine, with one thread setting, the same seed trains the
    same weights, bit for bit, in two separate runs (whatever the load was during each). Across
    thread counts and CPUs it does not hold, and nothing here assumes it does."""
    first, second = train_in_a_fresh_process(threads), train_in_a_fresh_process(threads)
    assert first[0] == second[0] == int(threads)  # TUTORIAL_THREADS applied at import
    assert first == second
