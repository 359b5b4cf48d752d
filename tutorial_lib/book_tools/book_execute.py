"""Execute the book's chapters into jupyter-book's cache, two at a time where one does not need the other.

Why: on a 2-core machine the tiny model's steps barely use a second thread (two 1-thread SFT runs side
by side train at ~1.8x the rate of one 2-thread run: ``benchmarks/results/sft_recipe.md``), so a build
that executes one chapter at a time leaves most of a core idle for most of an hour. ``make book`` runs
this first; jupyter-book then finds every chapter's outputs in the cache (``execute_notebooks: cache``
in ``_config.yml``) and executes nothing itself. Each kernel gets ``cores // jobs`` torch threads
(:func:`kernel_threads`, through ``TUTORIAL_THREADS``), fixed whatever else runs: a chapter's
numbers are then the same in every build on one machine, busy or idle, alone or beside another
chapter (:mod:`tutorial_lib.runtime.cpu_threads`).

A chapter starts once the chapters whose cached results it loads have finished (:data:`CHAPTER_NEEDS`),
or once this build has written the SFT checkpoints it loads (:data:`CHAPTER_CHECKPOINTS`; those it
loads only in its last cells need only have begun, :data:`CHAPTER_LATE_CHECKPOINTS`); a chapter
these tables do not know waits for every chapter before it, which is the old serial order. Of the
chapters ready at once, the one heading the longest chain of expected seconds starts first
(:func:`critical_paths`, :data:`CHAPTER_SECONDS`).
A failing chapter fails the build with its traceback; the chapters that need it do not run.

The executor is jupyter-cache's own (the one myst-nb calls), with the book's cell timeout and
``allow_errors`` from ``_config.yml``, so a cached chapter is exactly what jupyter-book would have made.
The timeout there is ``ci``'s; a larger preset gets :func:`cell_timeout`'s.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path

from tutorial_lib.book_tools.book import RECORD_NAME, ROOT, chapter_sources
from tutorial_lib.data.sft import STAGED_RUN
from tutorial_lib.pipeline import sft_dir
from tutorial_lib.presets import get_preset, scale_name
from tutorial_lib.runtime import durable
from tutorial_lib.runtime.durable import write_text

#: chapter -> the chapters whose cached results it loads. The shared caches every chapter may write
#: (the tiny model, expert data, an SFT checkpoint trained on demand) are written whole or under a
#: lock, so chapters that merely share them may run side by side.
CHAPTER_NEEDS: dict[str, tuple[str, ...]] = {
    "01_text_games": (),
    "02_prompts_tokens_actions": (),
    "03_expert_data": (),
    "04_supervised_finetuning": (),
    # chapters 5-8 start from chapter 4's SFT checkpoints (tic-tac-toe's and CookingWorld's are
    # trained over several cells, so they exist only once chapter 4 has finished)
    "05_policy_gradients": ("04_supervised_finetuning",),
    "06_ppo": ("04_supervised_finetuning",),
    "07_grpo_and_comparison": ("04_supervised_finetuning",),
    "08_evaluation_gap": ("04_supervised_finetuning",),
    # chapter 9 loads chapter 4's GuessTheNumber checkpoint through sft_policy, which trains it under
    # the checkpoint's lock if chapter 4 has not yet (pipeline.sft_policy)
    "09_pretrained_model": (),
    # chapter 10 reads a recorded benchmark, computes on toy tensors and collects a few turns with
    # chapter 4's tic-tac-toe checkpoint (CHAPTER_CHECKPOINTS): no other chapter's results
    "10_scaling_out": (),
    # the appendix reads records under benchmarks/results: it needs no chapter
    "11_how_the_book_knows": (),
}

#: chapter -> the games whose SFT checkpoints (chapter 4's) it loads. Once this build has written all
#: of them, the chapter starts without waiting for the rest of chapter 4: chapter 4 trains
#: GuessTheNumber, tic-tac-toe and math long before CookingWorld.
CHAPTER_CHECKPOINTS: dict[str, tuple[str, ...]] = {
    "05_policy_gradients": ("guess_the_number", "tictactoe"),
    "06_ppo": ("tictactoe", "math"),
    "07_grpo_and_comparison": ("math", "tictactoe"),
    "08_evaluation_gap": ("cookingworld",),
    "10_scaling_out": ("tictactoe",),
}

#: chapter -> games whose checkpoints it loads only in its last cells. It may start once this build
#: has begun training them in stages (chapter 4's cells, ``train_sft(stage=...)``): should it get
#: there first, ``pipeline.sft_policy`` waits for the live process finishing them. Chapter 6's
#: CookingWorld cells come after ~700 s of tic-tac-toe and math, which then run beside chapter 4's
#: CookingWorld training instead of after it.
CHAPTER_LATE_CHECKPOINTS: dict[str, tuple[str, ...]] = {
    "06_ppo": ("cookingworld",),
}


def checkpoints_written_since(since: float, checkpoints: dict[str, tuple[str, ...]] | None = None,
                              late: dict[str, tuple[str, ...]] | None = None):
    """chapter -> a test that every SFT checkpoint it loads was finished after ``since`` (wall clock):
    by this build, not an earlier one (its seal, :data:`~tutorial_lib.runtime.durable.MANIFEST`, is
    written last, whole, under the folder's lock); and that those it loads late
    (:data:`CHAPTER_LATE_CHECKPOINTS`) were finished, or begun in stages, after ``since``."""

    preset = get_preset()  # the kernels' preset: they inherit this process's TUTORIAL_SCALE
    checkpoints = CHAPTER_CHECKPOINTS if checkpoints is None else checkpoints
    late = CHAPTER_LATE_CHECKPOINTS if late is None else late

    def written_since(path: Path) -> bool:
        try:
            return path.stat().st_mtime >= since
        except OSError:
            return False

    def finished(game: str) -> bool:
        return written_since(sft_dir(game, preset) / durable.MANIFEST)

    def begun(game: str) -> bool:
        return finished(game) or written_since(sft_dir(game, preset) / STAGED_RUN)

    def test_for(chapter: str):
        return lambda: all(map(finished, checkpoints.get(chapter, ()))) and all(map(begun, late.get(chapter, ())))

    return {chapter: test_for(chapter) for chapter in {**checkpoints, **late}}


#: seconds per cell beyond ``ci``. ``_config.yml``'s 900 s guards ``ci``'s budget (3 minutes a cell,
#: with room for a busy machine); a real model's cells are far longer by design: at ``small`` on a
#: 2-core CPU, chapter 5's tic-tac-toe REINFORCE cell runs ~25 minutes and chapter 4's CookingWorld
#: parts up to ~12 (benchmarks/results/small_preset_chapters_cpu.md), and ``full`` trains for hours.
#: There the timeout only has to catch a kernel that hangs.
LONG_CELL_TIMEOUT = 6 * 3600


def cell_timeout(config_timeout: int, scale: str) -> int:
    """The cell timeout for a build at ``scale``: ``_config.yml``'s at ``ci``, :data:`LONG_CELL_TIMEOUT`
    (or the config's, if larger) at ``small`` and ``full``."""
    return config_timeout if scale == "ci" else max(config_timeout, LONG_CELL_TIMEOUT)


def execute_settings() -> dict:
    """How chapters execute in this process: ``_config.yml``'s ``execute`` settings, with the preset
    (``TUTORIAL_SCALE``) and its cell timeout (:func:`cell_timeout`) in place of the config's."""
    import yaml

    settings = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]
    scale = scale_name()
    return {**settings, "scale": scale, "timeout": cell_timeout(settings["timeout"], scale)}


@dataclass
class ChapterRun:
    name: str
    seconds: float
    started: float  # seconds after the build's start
    error: str | None = None


def chapter_order(names: list[str], needs: dict[str, tuple[str, ...]] | None = None) -> dict[str, tuple[str, ...]]:
    """Each chapter's prerequisites among ``names`` (book order): its entry in ``needs``, or every
    earlier chapter when it has none. A prerequisite that is not being built is not waited for."""
    needs = CHAPTER_NEEDS if needs is None else needs
    order = {}
    for position, name in enumerate(names):
        wanted = needs[name] if name in needs else tuple(names[:position])
        order[name] = tuple(n for n in wanted if n in names)
    return order


#: seconds each chapter took at ``ci`` in a fresh-clone build (2-core AMD EPYC, one torch thread each,
#: two chapters at a time; ``benchmarks/results/book_times_cpu.md``, the check of 2a21ccd). Only their
#: order matters: which chapter to start first when several are ready (:func:`critical_paths`). A
#: build that finds the last build's record uses that machine's own seconds instead (:func:`main`).
CHAPTER_SECONDS: dict[str, float] = {
    "01_text_games": 23, "02_prompts_tokens_actions": 32, "03_expert_data": 102,
    "04_supervised_finetuning": 1354, "05_policy_gradients": 599, "06_ppo": 982,
    "07_grpo_and_comparison": 311, "08_evaluation_gap": 251, "09_pretrained_model": 515, "10_scaling_out": 4,
    "11_how_the_book_knows": 10,
}


#: how long a chapter ready early waits for a longer one about to be ready (:func:`held`): chapter 6's
#: checkpoints follow chapter 5's by about a minute in chapter 4 (math's SFT, CookingWorld's evaluation
#: before its SFT); longer than that, and the core would idle for more than the order gains.
HOLD_SECONDS = 180.0


def critical_paths(order: dict[str, tuple[str, ...]], seconds: dict[str, float] | None = None) -> dict[str, float]:
    """Each chapter's expected seconds plus the longest chain of chapters that wait on it: how late
    the build ends at best if the chapter starts now. A chapter ``seconds`` does not know counts 1 s
    (then the longest chain of chapters counts).

    Why: of the chapters ready at once, the one heading the longest remaining work starts first
    (critical-path list scheduling). Chapter 6 (~980 s) then starts before chapter 5 (~600 s) when both
    are ready, so the shorter one fills the other core's gap after chapter 4 instead of trailing
    the build (the check of 2a21ccd ended with chapter 9, 5 and 6 in a row on one core)."""
    seconds = CHAPTER_SECONDS if seconds is None else seconds
    paths: dict[str, float] = {}

    def path(name: str) -> float:
        if name not in paths:
            waiting = [other for other, wanted in order.items() if name in wanted]
            paths[name] = seconds.get(name, 1.0) + max(map(path, waiting), default=0.0)
        return paths[name]

    return {name: path(name) for name in order}


def held(name: str, pending: list[str], ready: list[str], order: dict[str, tuple[str, ...]],
         priority: dict[str, float], early: dict[str, Callable[[], bool]]) -> bool:
    """Whether ``name``, ready, should leave a free worker to a chapter not yet ready that waits on the
    same chapters, may start early (it has a test in ``early``) and heads longer work (``priority``).

    Why: chapters 5, 6 and 7 all wait on chapter 4 and start as its checkpoints appear; chapter 5's
    (tic-tac-toe) appear about a minute before chapter 6's (math, and CookingWorld begun). Started
    then, chapter 5 would take the core that chapter 6, the longer, needs to finish beside chapter 4,
    and the build would end on chapter 6 alone. :func:`execute_chapters` holds such a chapter for at
    most ``hold_seconds``."""
    return any(other not in ready and other in early and order[other] == order[name] and order[name]
               and priority[other] > priority[name] for other in pending)


def _execute(path: str, timeout: int, allow_errors: bool) -> tuple[object, float, str | None]:
    """Run one notebook in a fresh kernel, in its own folder (as myst-nb does); in a worker process."""
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution

    notebook = nbformat.read(path, as_version=4)
    result = single_nb_execution(notebook, cwd=str(Path(path).parent), timeout=timeout,
                                 allow_errors=allow_errors, meta_override=True)
    return notebook, result.time, result.exc_string if result.err is not None else None


def execute_chapters(notebooks: list[Path], cache_path: Path, *, jobs: int = 2, timeout: int = 900,
                     allow_errors: bool = False, needs: dict[str, tuple[str, ...]] | None = None,
                     early: dict[str, Callable[[], bool]] | None = None, poll_seconds: float = 5.0,
                     chapter_seconds: dict[str, float] | None = None, hold_seconds: float = 0.0,
                     log=print) -> list[ChapterRun]:
    """Execute ``notebooks`` (book order), at most ``jobs`` at a time, and store each executed
    notebook in the jupyter-cache at ``cache_path``. Returns one :class:`ChapterRun` per chapter that ran.

    A chapter starts when the chapters it needs have finished, or earlier when its test in ``early``
    passes (checked every ``poll_seconds``; :func:`checkpoints_written_since`); of those ready, the one
    heading the longest chain of ``chapter_seconds`` first (:func:`critical_paths`). A chapter ready
    early leaves its worker free for up to ``hold_seconds`` while a chapter that waits on the same
    chapters and heads longer work may start early too (:func:`held`). A chapter whose need failed
    does not run."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    early = early or {}
    by_name = {path.stem: path for path in notebooks}
    order = chapter_order(list(by_name), needs)
    priority = critical_paths(order, chapter_seconds)
    ready_since: dict[str, float] = {}  # when each chapter was first seen ready
    cache = get_cache(str(cache_path))
    runs: dict[str, ChapterRun] = {}
    failed: set[str] = set()
    pending = list(by_name)
    running: dict[Future, tuple[str, float]] = {}
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        while pending or running:
            for name in [n for n in pending if any(w in failed for w in order[n])]:
                pending.remove(name)
                failed.add(name)
                log(f"skipped {name}: it needs {', '.join(w for w in order[name] if w in failed)}, which failed")
            ready = sorted((n for n in pending if all(w in runs and runs[w].error is None for w in order[n])
                            or (n in early and early[n]())),
                           key=lambda n: (-priority[n], list(by_name).index(n)))
            now = time.perf_counter()
            for name in ready:
                ready_since.setdefault(name, now)
            if running:  # a hold waits for a running chapter's checkpoints, so only while one runs
                ready = [n for n in ready if not held(n, pending, ready, order, priority, early)
                         or now - ready_since[n] >= hold_seconds]
            for name in ready[: max(0, jobs - len(running))]:
                pending.remove(name)
                running[pool.submit(_execute, str(by_name[name]), timeout, allow_errors)] = (name, time.perf_counter())
                log(f"[{time.perf_counter() - start:6.0f} s] started  {name}")
            if not running:  # nothing left can start: what remains waits on a chapter that failed
                break
            # a free worker looks again every poll_seconds: a chapter may start early (``early``)
            done, _ = wait(running, timeout=poll_seconds if len(running) < jobs and pending else None,
                           return_when=FIRST_COMPLETED)
            for future in done:
                name, began = running.pop(future)
                try:
                    notebook, seconds, error = future.result()
                except Exception as crash:  # the worker itself died (out of memory, a killed kernel manager)
                    notebook, seconds, error = None, time.perf_counter() - began, f"{type(crash).__name__}: {crash}"
                runs[name] = ChapterRun(name, seconds, began - start, error)
                if error is None:
                    cache.cache_notebook_bundle(CacheBundleIn(notebook, str(by_name[name]),
                                                              data={"execution_seconds": seconds}),
                                                check_validity=False, overwrite=True)
                    # the lookup jupyter-book makes: a miss would make it execute the chapter again
                    cache.match_cache_notebook(nbformat.read(by_name[name], as_version=4))
                    log(f"[{time.perf_counter() - start:6.0f} s] finished {name} in {seconds:.0f} s")
                else:
                    failed.add(name)
                    log(f"[{time.perf_counter() - start:6.0f} s] FAILED   {name} after {seconds:.0f} s\n{error}")
    return list(runs.values())


def kernel_threads(jobs: int, cores: int | None = None) -> int:
    """torch threads for each of ``jobs`` kernels side by side: the cores shared out, at least one.
    Decided from the machine and the build's settings, never from the load."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, jobs))


def expected_seconds(record: Path) -> dict[str, float]:
    """:data:`CHAPTER_SECONDS`, with each chapter that the build recorded at ``record`` finished in its
    own seconds: the last build on this machine is the better guess of the next."""
    seconds = dict(CHAPTER_SECONDS)
    try:
        runs = json.loads(record.read_text())["chapters"]
    except (OSError, ValueError, KeyError, TypeError):
        return seconds  # no record yet (a fresh clone), or one this code cannot read: the table
    seconds.update({run["name"]: float(run["seconds"]) for run in runs
                    if isinstance(run, dict) and run.get("error") is None and "name" in run and "seconds" in run})
    return seconds


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tutorial_lib.book_tools.book_execute", description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=ROOT / "_build" / ".jupyter_cache",
                        help="the jupyter-cache folder jupyter-book reads (default: _build/.jupyter_cache)")
    parser.add_argument("--jobs", type=int, default=2, help="chapters executed at once (default 2)")
    parser.add_argument("--record", type=Path, default=ROOT / "_build" / RECORD_NAME,
                        help="where each chapter's start and seconds go, as JSON (read by `book cell-times`)")
    parser.add_argument("chapters", nargs="*", type=Path, help="notebooks to execute (default: every chapter)")
    args = parser.parse_args(argv)
    settings = execute_settings()
    # every kernel inherits the thread count; a count the user set is theirs
    chosen = os.environ.get("TUTORIAL_THREADS") or os.environ.get("OMP_NUM_THREADS")
    threads = chosen or str(kernel_threads(args.jobs))
    notebooks = args.chapters or [py.with_suffix(".ipynb") for py in chapter_sources()]
    timeout = settings["timeout"]
    print(f"executing {len(notebooks)} chapters at TUTORIAL_SCALE={settings['scale']}, {args.jobs} at a time, "
          f"{threads} torch thread(s) each, cell timeout {timeout} s")
    start = time.perf_counter()
    saved = os.environ.get("TUTORIAL_THREADS")
    if not chosen:
        os.environ["TUTORIAL_THREADS"] = threads
    try:
        runs = execute_chapters([Path(p).resolve() for p in notebooks], args.cache, jobs=args.jobs,
                                timeout=timeout, allow_errors=settings["allow_errors"],
                                early=checkpoints_written_since(time.time()),
                                chapter_seconds=expected_seconds(args.record), hold_seconds=HOLD_SECONDS)
    finally:  # this process's own setting is left as it was
        if saved is None:
            os.environ.pop("TUTORIAL_THREADS", None)
        else:
            os.environ["TUTORIAL_THREADS"] = saved
    wall = time.perf_counter() - start
    busy = sum(run.seconds for run in runs)
    print(f"{len(runs)} of {len(notebooks)} chapters ran in {wall:.0f} s ({busy:.0f} s of chapters, "
          f"{args.jobs} at a time)")
    write_text(args.record, json.dumps({"jobs": args.jobs, "wall_seconds": round(wall, 1),
                                         "chapters": [asdict(run) for run in runs]}, indent=1))
    return 0 if len(runs) == len(notebooks) and all(run.error is None for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
