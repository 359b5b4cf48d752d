"""Each chapter's time and its longest cells, alone or beside a busy neighbour process.

    python benchmarks/chapter_times.py notebooks/04_supervised_finetuning.ipynb [more chapters]
    python benchmarks/chapter_times.py --neighbour-threads 1 notebooks/0*.ipynb

Executes each chapter's ``.ipynb`` as the book build does (nbclient, the preset from
``TUTORIAL_SCALE``, the build's cell timeout for that preset), in order, in the repository root, and
prints one JSON line per chapter: its seconds, its longest cell (number, first line, seconds) and
every cell over ``--show-over`` seconds. With ``--neighbour-threads N`` a process keeping N threads
busy (matrix products) runs beside it the whole time: a reader's machine is rarely idle. The
budget the book holds itself to at ``ci`` on a 2-core machine is ``tutorial_lib.book_tools.book``'s
``CELL_BUDGET``, ``CHAPTER_BUDGET``, ``SFT_CHAPTER_BUDGET`` and ``BOOK_BUDGET`` (the build's cell log
marks what is over them); a chapter opened alone on a fresh machine is held to 15 minutes.
"""

import argparse
import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cell_seconds(cell) -> float:
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not start or not end:
        return 0.0
    parse = lambda stamp: datetime.fromisoformat(stamp.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def run_chapter(path: Path, timeout: int, show_over: float, save_dir: Path | None = None) -> dict:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}},
                            record_timing=True)
    start = time.perf_counter()
    error = None
    try:
        client.execute()
    except Exception as exc:  # a failed cell: report it with the times so far
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    total = time.perf_counter() - start
    if save_dir is not None:  # the executed chapter, outputs included, to read what this run printed
        save_dir.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, save_dir / path.name)
    # numbered among the code cells from 1, as `make book`'s table numbers them
    cells = [(i, cell, cell_seconds(cell)) for i, cell in enumerate(
        (c for c in notebook.cells if c.cell_type == "code"), start=1)]
    longest = max(cells, key=lambda c: c[2])
    first_line = lambda cell: cell.source.strip().splitlines()[0][:70] if cell.source.strip() else ""  # noqa: E731
    return {"chapter": path.stem, "seconds": round(total, 1),
            "longest_cell": {"cell": longest[0], "source": first_line(longest[1]), "seconds": round(longest[2], 1)},
            "cells_over": [{"cell": i, "source": first_line(c), "seconds": round(s, 1)} for i, c, s in cells
                           if s > show_over],
            "error": error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="+", type=Path)
    parser.add_argument("--neighbour-threads", type=int, default=0)
    parser.add_argument("--show-over", type=float, default=30.0, help="list every cell over this many seconds")
    parser.add_argument("--timeout", type=int,
                        help="seconds per cell (default: the book build's for the preset, 900 at ci)")
    parser.add_argument("--save-dir", type=Path, help="write each executed chapter, with its outputs, here")
    args = parser.parse_args()
    missing = [str(chapter) for chapter in args.chapters if not chapter.is_file()]
    if missing:  # before any chapter runs: a typo should not cost the chapters before it
        known = ", ".join(sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
        parser.error(f"no such chapter: {', '.join(missing)} (the chapters: {known})")
    if args.timeout is None:
        from tutorial_lib.book_tools.book_execute import execute_settings

        args.timeout = execute_settings()["timeout"]
    neighbour = None
    if args.neighbour_threads:
        # benchmarks/threads.py's neighbour: matrix products on that many threads until killed
        neighbour = subprocess.Popen([sys.executable, str(Path(__file__).with_name("threads.py")),
                                      "--neighbour", str(args.neighbour_threads)])
        time.sleep(3)
    try:
        for chapter in args.chapters:
            result = run_chapter(chapter, args.timeout, args.show_over, args.save_dir)
            print(json.dumps({"neighbour_threads": args.neighbour_threads, **result}), flush=True)
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()


if __name__ == "__main__":
    main()
