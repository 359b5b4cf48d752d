"""Where the library keeps what it builds once and reuses (every chapter).

    cache_root() / "runs" / preset.name      # a chapter's RL runs

The tiny model and its tokenizer, SmolLM2 converted from its GGUF file, expert data, SFT
checkpoints (named by their settings, :mod:`tutorial_lib.pipeline`) and the chapters' RL runs all
live under one folder: ``~/.cache/tutorial_lib``, or ``TUTORIAL_CACHE`` when it is set (the tests
point it at a temporary folder, so they never touch a reader's cache).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_root() -> Path:
    """The cache folder (not created here: each user creates its own sub-folder)."""
    return Path(os.environ.get("TUTORIAL_CACHE", Path.home() / ".cache" / "tutorial_lib"))


def write_whole(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename, so that another process
    reading the cache sees the old file, no file, or the whole new one: never half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise
    return path


def folder_lock(folder: str | Path):
    """An inter-process lock for one cache folder (``<folder>.lock`` beside it), held while a process
    writes the folder: two chapters executing at once (``make book``) must not train the same SFT
    checkpoint into one folder together. Re-entrant within a process."""
    from filelock import FileLock

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(folder.with_name(folder.name + ".lock"), is_singleton=True)
