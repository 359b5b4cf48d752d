"""`make book` executes the chapters two at a time into jupyter-book's cache (tutorial_lib.book_tools.book_execute).

Small notebooks stand in for chapters: each records when its kernel ran, so the tests can see which
ran side by side, which waited for which, and what a failure stops.
"""

import json
import os
import time

import nbformat
import pytest
from jupyter_cache import get_cache

from tutorial_lib.book_tools.book_execute import (
    CHAPTER_NEEDS,
    CHAPTER_SECONDS,
    chapter_order,
    critical_paths,
    execute_chapters,
    expected_seconds,
    kernel_threads,
)
from tutorial_lib.data.sft import STAGED_RUN
from tutorial_lib.runtime.durable import write_text


def notebook(folder, name, body="time.sleep(1.5)"):
    cells = [nbformat.v4.new_markdown_cell(f"# {name}"),
             nbformat.v4.new_code_cell(f"import json, time\nstart = time.time()\n{body}"),
             nbformat.v4.new_code_cell(f"open('{name}.json', 'w').write(json.dumps([start, time.time()]))")]
    nb = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                          "language": "python"}})
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def interval(folder, name):
    return json.loads((folder / f"{name}.json").read_text())


def test_chapters_run_side_by_side_and_wait_for_what_they_need(tmp_path):
    paths = [notebook(tmp_path, name) for name in ("a", "b", "c")]
    runs = execute_chapters(paths, tmp_path / "cache", jobs=2, timeout=60, needs={"a": (), "b": (), "c": ("a",)},
                            log=lambda _: None)
    assert sorted(run.name for run in runs) == ["a", "b", "c"] and all(run.error is None for run in runs)
    (a_start, a_end), (b_start, b_end), (c_start, _) = (interval(tmp_path, n) for n in "abc")
    assert a_start < b_end and b_start < a_end  # a and b overlapped
    assert c_start >= a_end  # c waited for a
    # jupyter-book finds each executed notebook by looking the source notebook up in the cache
    cache = get_cache(str(tmp_path / "cache"))
    for path in paths:
        _, merged = cache.merge_match_into_notebook(nbformat.read(path, as_version=4))
        assert any(cell.get("outputs") is not None and cell.execution_count for cell in merged.cells
                   if cell.cell_type == "code")


def test_a_failing_chapter_fails_and_what_needs_it_does_not_run(tmp_path):
    paths = [notebook(tmp_path, "a", "raise RuntimeError('chapter a broke')"), notebook(tmp_path, "b", "pass"),
             notebook(tmp_path, "c", "pass")]
    lines = []
    runs = {run.name: run for run in execute_chapters(paths, tmp_path / "cache", jobs=2, timeout=60,
                                                      needs={"a": (), "b": (), "c": ("a",)}, log=lines.append)}
    assert "chapter a broke" in runs["a"].error
    assert runs["b"].error is None and "c" not in runs
    assert not (tmp_path / "c.json").exists()
    assert any(line.startswith("skipped c") for line in lines)
    with pytest.raises(KeyError):  # a failed chapter is not cached: jupyter-book would execute it and fail too
        get_cache(str(tmp_path / "cache")).match_cache_notebook(nbformat.read(paths[0], as_version=4))


def test_one_job_runs_the_chapters_one_after_another(tmp_path):
    paths = [notebook(tmp_path, name, "time.sleep(0.5)") for name in ("a", "b")]
    execute_chapters(paths, tmp_path / "cache", jobs=1, timeout=60, needs={"a": (), "b": ()}, log=lambda _: None)
    assert interval(tmp_path, "b")[0] >= interval(tmp_path, "a")[1]


def test_of_the_ready_chapters_the_one_heading_the_longest_work_starts_first(tmp_path):
    paths = [notebook(tmp_path, name, "time.sleep(0.2)") for name in ("a", "b", "c", "d")]
    # d waits on a: a heads 1 + 30 s of work, more than b (20) or c (5), so a runs first; once a has
    # finished, d (30 s) comes before b and c, although it comes last in the book
    execute_chapters(paths, tmp_path / "cache", jobs=1, timeout=60, needs={"a": (), "b": (), "c": (), "d": ("a",)},
                     chapter_seconds={"a": 1, "b": 20, "c": 5, "d": 30}, log=lambda _: None)
    starts = {name: interval(tmp_path, name)[0] for name in "abcd"}
    assert sorted(starts, key=starts.get) == ["a", "d", "b", "c"]


@pytest.mark.parametrize("hold", [0.0, 30.0])
def test_a_chapter_ready_early_leaves_the_core_to_a_longer_one_about_to_be_ready(tmp_path, hold):
    """As chapter 5 (short) and chapter 6 (long) wait on chapter 4, whose checkpoints for chapter 5
    appear first: with a hold the long one starts first, without one the short one does."""
    first = notebook(tmp_path, "first", "open('for_short', 'w').write('1')\ntime.sleep(2)\n"
                                         "open('for_long', 'w').write('1')\ntime.sleep(6)")
    short, long = notebook(tmp_path, "short", "time.sleep(0.2)"), notebook(tmp_path, "long", "time.sleep(0.2)")
    execute_chapters([first, short, long], tmp_path / "cache", jobs=2, timeout=60,
                     needs={"first": (), "short": ("first",), "long": ("first",)},
                     early={"short": (tmp_path / "for_short").exists, "long": (tmp_path / "for_long").exists},
                     chapter_seconds={"first": 10, "short": 5, "long": 50}, hold_seconds=hold, poll_seconds=0.1,
                     log=lambda _: None)
    short_start, long_start = interval(tmp_path, "short")[0], interval(tmp_path, "long")[0]
    assert (long_start < short_start) == bool(hold)


def test_the_book_starts_chapter_6_before_chapter_5_and_chapter_4_first():
    paths = critical_paths(chapter_order(list(CHAPTER_NEEDS)))
    assert max(paths, key=paths.get) == "04_supervised_finetuning"
    assert paths["06_ppo"] > paths["05_policy_gradients"] > paths["07_grpo_and_comparison"] > paths["08_evaluation_gap"]
    # a chapter the table does not know counts 1 s, so a longer chain of them still goes first
    assert critical_paths({"x": (), "y": ("x",), "z": ()}, seconds={}) == {"x": 2.0, "y": 1.0, "z": 1.0}


def test_the_last_builds_record_replaces_the_tables_seconds(tmp_path):
    record = tmp_path / "chapter_runs.json"
    assert expected_seconds(record) == CHAPTER_SECONDS  # no record: the table
    record.write_text("not json")
    assert expected_seconds(record) == CHAPTER_SECONDS
    record.write_text(json.dumps({"jobs": 2, "chapters": [
        {"name": "05_policy_gradients", "seconds": 1500.0, "started": 0, "error": None},
        {"name": "06_ppo", "seconds": 9.0, "started": 0, "error": "Traceback ..."}]}))  # a failed run says nothing
    seconds = expected_seconds(record)
    assert seconds["05_policy_gradients"] == 1500.0 and seconds["06_ppo"] == CHAPTER_SECONDS["06_ppo"]


def test_a_chapter_the_table_does_not_know_waits_for_every_earlier_chapter():
    order = chapter_order(["01_x", "02_new", "03_y"], needs={"01_x": (), "03_y": ("01_x", "not_built")})
    assert order == {"01_x": (), "02_new": ("01_x",), "03_y": ("01_x",)}


def test_every_chapter_of_the_book_is_in_the_table_and_needs_only_earlier_chapters():
    from tutorial_lib.book_tools.book import chapter_sources

    names = [path.stem for path in chapter_sources()]
    assert set(CHAPTER_NEEDS) == set(names)
    for position, name in enumerate(names):
        assert set(CHAPTER_NEEDS[name]) <= set(names[:position])


def test_a_cell_over_the_timeout_fails_its_chapter(tmp_path):
    path = notebook(tmp_path, "slow", "time.sleep(30)")
    start = time.perf_counter()
    (run,) = execute_chapters([path], tmp_path / "cache", jobs=1, timeout=2, needs={}, log=lambda _: None)
    assert run.error is not None and "Timeout" in run.error
    assert time.perf_counter() - start < 25


def test_the_command_records_each_chapter_and_fails_when_one_fails(tmp_path):
    from tutorial_lib.book_tools.book_execute import main

    good, bad = notebook(tmp_path, "good", "pass"), notebook(tmp_path, "bad", "1 / 0")
    record = tmp_path / "runs.json"
    assert main(["--cache", str(tmp_path / "cache"), "--record", str(record), str(good)]) == 0
    written = json.loads(record.read_text())
    assert [run["name"] for run in written["chapters"]] == ["good"] and written["wall_seconds"] > 0
    assert main(["--cache", str(tmp_path / "cache"), "--record", str(record), str(good), str(bad)]) == 1


def test_every_kernel_gets_a_thread_count_fixed_by_the_build_not_by_the_load(tmp_path, monkeypatch):
    """Two chapters at a time on two cores: one thread each, in every build on that machine, so
    a chapter computes the same numbers whether it ran alone, beside another, or beside a busy
    program. A count the user set is passed on as it is; the builder's own setting is untouched."""
    from tutorial_lib.book_tools.book_execute import main

    assert [kernel_threads(jobs, cores) for jobs, cores in [(2, 2), (1, 2), (2, 1), (2, 8), (3, 8)]] == [1, 2, 1, 4, 2]
    monkeypatch.delenv("TUTORIAL_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen = notebook(tmp_path, "seen", "import os, tutorial_lib, torch\n"
                    "open('threads.json', 'w').write(json.dumps([os.environ.get('TUTORIAL_THREADS'), torch.get_num_threads()]))")
    args = ["--cache", str(tmp_path / "cache"), "--record", str(tmp_path / "runs.json"), "--jobs", "2", str(seen)]
    assert main(args) == 0
    expected = kernel_threads(2)
    assert json.loads((tmp_path / "threads.json").read_text()) == [str(expected), expected]
    assert "TUTORIAL_THREADS" not in os.environ
    monkeypatch.setenv("TUTORIAL_THREADS", "3")
    assert main(args) == 0
    assert json.loads((tmp_path / "threads.json").read_text()) == ["3", 3]


@pytest.mark.parametrize("scale", ["ci", "small", "full"])
def test_the_command_gives_a_larger_preset_room_for_its_long_cells(tmp_path, monkeypatch, scale):
    """At ``ci`` the build keeps _config.yml's 900-s cell timeout (the budget's guard); at ``small`` a real
    model's REINFORCE cell runs ~25 minutes on a 2-core CPU, which that timeout would kill."""
    import tutorial_lib.book_tools.book_execute as book_execute

    used = []
    monkeypatch.setenv("TUTORIAL_SCALE", scale)
    monkeypatch.setattr(book_execute, "execute_chapters", lambda paths, cache, **kw: used.append(kw["timeout"]) or [])
    book_execute.main(["--cache", str(tmp_path / "cache"), "--record", str(tmp_path / "runs.json"),
                       str(notebook(tmp_path, "a", "pass"))])
    assert used == ([900] if scale == "ci" else [book_execute.LONG_CELL_TIMEOUT])
    assert book_execute.LONG_CELL_TIMEOUT >= 2 * 1800


def test_a_chapter_starts_early_once_what_it_loads_is_written(tmp_path):
    """Chapter 5 needs chapter 4, but only its first checkpoints: it starts once they are written."""
    first = notebook(tmp_path, "first", "time.sleep(0.5)\nopen('checkpoint', 'w').write('done')\ntime.sleep(8)")
    second = notebook(tmp_path, "second", "pass")
    runs = execute_chapters([first, second], tmp_path / "cache", jobs=2, timeout=60,
                            needs={"first": (), "second": ("first",)},
                            early={"second": (tmp_path / "checkpoint").exists}, poll_seconds=0.2,
                            log=lambda _: None)
    assert all(run.error is None for run in runs)
    assert interval(tmp_path, "second")[0] < interval(tmp_path, "first")[1]  # began before first ended


def test_each_chapter_after_chapter_4_waits_for_this_builds_checkpoints(tmp_path, monkeypatch):
    from tutorial_lib.book_tools.book_execute import checkpoints_written_since
    from tutorial_lib.pipeline import sft_dir
    from tutorial_lib.presets import get_preset
    from tutorial_lib.runtime.durable import seal

    monkeypatch.setenv("TUTORIAL_CACHE", str(tmp_path))
    monkeypatch.setenv("TUTORIAL_SCALE", "ci")
    preset = get_preset()

    def finish(game):  # what train_sft's last write leaves: the folder sealed
        folder = sft_dir(game, preset)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "sft_result.json").write_text("{}")
        seal(folder)

    finish("tictactoe")  # an earlier build's checkpoint
    time.sleep(0.05)
    # a file's time stamp comes from a coarser clock than time.time() and can lag it by a tick:
    # "since" a little before now, well after the earlier build's write
    tests = checkpoints_written_since(time.time() - 0.02)
    assert set(tests) == {"05_policy_gradients", "06_ppo", "07_grpo_and_comparison", "08_evaluation_gap",
                          "10_scaling_out"}
    assert not any(test() for test in tests.values())
    finish("tictactoe")  # this build's: chapter 10 needs no other
    assert tests["10_scaling_out"]() and not tests["05_policy_gradients"]()
    for game in ("guess_the_number", "math"):
        finish(game)
    assert tests["05_policy_gradients"]() and tests["07_grpo_and_comparison"]()
    assert not tests["06_ppo"]() and not tests["08_evaluation_gap"]()  # CookingWorld is not trained yet
    # chapter 6 loads CookingWorld's only in its last cells: it starts once chapter 4's staged run has
    # begun (sft_policy waits for it there); chapter 8 loads it first, so it waits for the seal
    write_text(sft_dir("cookingworld", preset) / STAGED_RUN, "{}")
    assert tests["06_ppo"]() and not tests["08_evaluation_gap"]()
    finish("cookingworld")
    assert all(test() for test in tests.values())


def test_a_staged_run_left_by_an_earlier_build_starts_nothing_early(tmp_path, monkeypatch):
    from tutorial_lib.book_tools.book_execute import checkpoints_written_since
    from tutorial_lib.pipeline import sft_dir
    from tutorial_lib.presets import get_preset
    from tutorial_lib.runtime.durable import seal

    monkeypatch.setenv("TUTORIAL_CACHE", str(tmp_path))
    monkeypatch.setenv("TUTORIAL_SCALE", "ci")
    preset = get_preset()
    write_text(sft_dir("cookingworld", preset) / STAGED_RUN, "{}")  # a killed earlier build's
    time.sleep(0.05)
    test = checkpoints_written_since(time.time() - 0.02,  # a tick before now (file time stamps lag), after the marker
                                     {"06_ppo": ("tictactoe",)}, {"06_ppo": ("cookingworld",)})["06_ppo"]
    seal(sft_dir("tictactoe", preset))
    assert not test()  # tic-tac-toe is this build's, CookingWorld's staged run is not
    write_text(sft_dir("cookingworld", preset) / STAGED_RUN, "{}")
    assert test()
