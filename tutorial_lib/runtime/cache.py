"""Where the library keeps what it builds once and reuses (every chapter).

    cache_root() / "runs" / preset.name      # a chapter's RL runs

The tiny model and its tokenizer, SmolLM2 converted from its GGUF file, expert data, SFT
checkpoints (named by their settings, :mod:`tutorial_lib.pipeline`) and the chapters' RL runs all
live under one folder: ``~/.cache/tutorial_lib``, or ``TUTORIAL_CACHE`` when it is set (the tests
point it at a temporary folder, so they never touch a reader's cache). What is written there is
written whole, crash or not: :mod:`tutorial_lib.runtime.durable`.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The cache folder (not created here: each user creates its own sub-folder)."""
    return Path(os.environ.get("TUTORIAL_CACHE", Path.home() / ".cache" / "tutorial_lib"))


def folder_lock(folder: str | Path):
    """An inter-process lock for one cache folder (``.<folder>.lock`` beside it, hidden), held while a process
    writes the folder: two chapters executing at once (``make book``) must not train the same SFT
    checkpoint into one folder together. Re-entrant within a process."""
    from filelock import FileLock

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(folder.with_name(f".{folder.name}.lock"), is_singleton=True)
