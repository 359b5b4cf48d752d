"""The chapter files are consistent: pairs in sync, no outputs, the Colab cell from _config.yml."""

import shutil

from tutorial_lib.book_tools import book


def test_chapters_pass_the_notebook_checks():
    assert book.check_notebooks() == []


def test_setup_cell_is_generated_from_the_one_url():
    url = book.repository_url()
    assert url.startswith("https://github.com/")
    source = book.setup_cell_source(url)
    assert f"git+{url}" in source and "google.colab" in source
    compile(source, "<setup cell>", "exec")  # valid Python


def test_checks_catch_a_stale_pair_and_committed_outputs(tmp_path):
    for name in ("_config.yml", "notebooks"):
        src = book.ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    chapter = sorted((tmp_path / "notebooks").glob("01_*.py"))[0]
    chapter.write_text(chapter.read_text() + "\n# %%\nprint('new cell')\n")
    ipynb = chapter.with_suffix(".ipynb")
    ipynb.write_text(ipynb.read_text().replace('"outputs": []', '"outputs": [{"output_type": "stream", "name": "stdout", "text": "x"}]', 1))
    problems = book.check_notebooks(tmp_path)
    assert any("differ" in p for p in problems)
    assert any("with outputs" in p for p in problems)


def test_html_check_reports_missing_pages(tmp_path):
    problems = book.check_html(tmp_path)
    assert len(problems) == len(book.chapter_sources()) and all("missing" in p for p in problems)


def test_a_solution_whose_check_fails_is_a_build_problem():
    """The built page of a chapter: a reader's stub may say "not yet", a hidden solution may not."""
    from bs4 import BeautifulSoup

    page = """
    <div class="cell docutils container"><div class="cell_output"><pre>not yet: check_gae
      - your function raises NotImplementedError</pre></div></div>
    <div class="cell tag_hide-input docutils container"><div class="cell_output"><pre>not yet: check_gae
      - yours uses 0
passed: check_gae (5 cases)</pre></div></div>
    <div class="cell tag_hide-input docutils container"><div class="cell_output"><pre>not yet: check_k3
      - expected 0.1, got 0.2</pre></div></div>"""
    problems = book.unsolved_exercises(BeautifulSoup(page, "html.parser"))
    assert problems == ["a solution's check did not pass: not yet: check_k3"]


def test_cell_times_are_logged_by_the_kernel_and_read_back_by_chapter(tmp_path, capsys):
    """A shell with ``time_cells`` installed logs each cell it runs; ``cell_times`` finds the cells'
    chapters by their source and sums them per kernel (one kernel per chapter in a build)."""
    import json

    import nbformat
    from IPython.core.interactiveshell import InteractiveShell

    chapter = book.chapter_sources()[0].with_suffix(".ipynb")
    cells = [c.source for c in nbformat.read(chapter, as_version=4).cells if c.cell_type == "code"]
    log = tmp_path / "cell_times.jsonl"
    shell = InteractiveShell.instance()
    try:
        book.time_cells(log)
        shell.run_cell("import time; time.sleep(0.3)")
        shell.run_cell("1 / 0")
    finally:  # no shell left behind: later tests would think they run in a notebook
        InteractiveShell.clear_instance()
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [entry["failed"] for entry in logged] == [False, True]
    assert logged[0]["seconds"] >= 0.3
    # a build's log: two kernels, each starting with the set-up cell every chapter shares
    second = book.chapter_sources()[1].with_suffix(".ipynb")
    cells_2 = [c.source for c in nbformat.read(second, as_version=4).cells if c.cell_type == "code"]
    runs = [(7, cells[0], 1.0), (7, cells[1], 2.0), (7, cells[2], 200.0), (8, cells_2[0], 1.0), (8, cells_2[1], 3.0)]
    log.write_text("".join(json.dumps({"kernel": k, "cell": book._source_key(source), "seconds": s, "failed": False})
                           + "\n" for k, source, s in runs))
    first, other = book.cell_times(log)
    assert first["chapter"] == chapter.stem and first["seconds"] == 203.0
    assert first["longest"]["cell"] == 3 and first["longest"]["seconds"] == 200.0
    assert other["chapter"] == second.stem and other["seconds"] == 4.0
    book.print_cell_times(log)
    printed = capsys.readouterr().out
    assert f"over {book.CELL_BUDGET} s: cell 3" in printed and chapter.stem in printed
    assert "wall clock" not in printed  # no record of how the chapters ran: only their sum
    # `book execute` recorded the build: the book's time is its wall clock, over the budget here
    (tmp_path / book.RECORD_NAME).write_text(json.dumps({"jobs": 2, "wall_seconds": book.BOOK_BUDGET + 1.0, "chapters": [
        {"name": "05_policy_gradients", "seconds": 600.0, "started": 900.0, "error": None},
        {"name": "04_supervised_finetuning", "seconds": 900.0, "started": 0.0, "error": None}]}))
    book.print_cell_times(log)
    printed = capsys.readouterr().out.splitlines()
    wall_line = next(line for line in printed if "wall clock" in line)
    assert f"{book.BOOK_BUDGET + 1:.0f} *" in wall_line and "2 at a time" in wall_line
    timeline = printed[printed.index("timeline (seconds from the start of the build):") + 1:][:2]
    assert timeline[0].split() == ["0", "->", "900", "04_supervised_finetuning"]  # in the order they started
    assert timeline[1].split() == ["900", "->", "1500", "05_policy_gradients"]
