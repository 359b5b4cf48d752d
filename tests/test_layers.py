"""The library's layering (``[tool.importlinter]`` in pyproject.toml, drawn in tutorial_lib/__init__.py)
holds, and the check would catch a break: a game that imports the RL code fails it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(package_parent: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=package_parent, env=env, capture_output=True, text=True)


def test_the_packages_keep_their_layers():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


def test_a_game_that_imports_the_rl_code_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "tutorial_lib", tmp_path / "tutorial_lib", ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path / "tutorial_lib" / "envs" / "tictactoe.py"
    planted.write_text(planted.read_text() + "\nfrom tutorial_lib.rl import ppo  # planted violation\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout and "tutorial_lib.envs.tictactoe -> tutorial_lib.rl.ppo" in done.stdout


def test_nothing_in_the_library_may_import_the_book_tooling(tmp_path):
    shutil.copytree(ROOT / "tutorial_lib", tmp_path / "tutorial_lib", ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path / "tutorial_lib" / "pipeline.py"
    planted.write_text(planted.read_text() + "\nfrom tutorial_lib.book_tools import book  # planted violation\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "nothing in the library imports the book's build tooling BROKEN" in done.stdout
