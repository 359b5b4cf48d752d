"""Writes that survive a crash at any instant: checkpoints, logs and every cache folder (chapter 5 on).

    write_text(path, text)                  # the old file, or the whole new one: never half
    with building(folder) as staging:       # a folder built aside and put in place whole
        torch.save(state, staging / "training_state.pt")
    if recover(folder): ...                 # a complete folder is there (after any crash)

A run on a laptop or a preemptible notebook runtime can be killed at any instruction, a power cut
can lose whatever the kernel had not yet written to the disk, and the next run trusts what it
finds. Three rules make what it finds either the old state or the new one:

1. A file is written beside its place, flushed to the disk (``fsync``) and renamed over it; the
   folder is fsynced too, so that the rename itself survives a power cut.
2. A folder is built under ``<name>.tmp``. Its last file is a manifest, ``.complete.json``: every
   file in it with its size. Then it is renamed into place; one that replaces an older folder first
   moves the older one to ``<name>.old`` (a folder cannot be renamed over a non-empty one).
3. A reader calls :func:`recover` first. It finishes an interrupted replacement or undoes it,
   keeping the newest complete folder, and deletes the leftovers. A folder whose manifest is
   missing, or does not match its files (one cut short, one half deleted), is never trusted.

``tests/test_crash_safety.py`` kills writers at every file-system operation and checks that the
next process resumes, or rebuilds, and that its next write succeeds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from glob import escape as glob_escape
from pathlib import Path

from tutorial_lib.runtime.cache import folder_lock

#: the last file written into a folder: its files and their sizes
MANIFEST = ".complete.json"


def fsync_dir(folder: str | Path) -> None:
    """Make the folder's entries (a rename, a new or deleted file) survive a power cut."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file, fsync and a rename: another process (or
    the next one, after a crash) sees the old file, no file, or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_writers_files(path)
    handle, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def _remove_dead_writers_files(path: Path) -> None:
    """Delete the staging files of ``path`` left by writers that were killed: their names carry the
    writer's process id, and a writer still alive (another process writing the same file) keeps its own."""
    for leftover in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        pid = leftover.name[len(path.name) + 2:].split(".")[0]
        if pid.isdigit() and not process_alive(int(pid)):
            leftover.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    """Whether a process with id ``pid`` runs on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def write_text(path: str | Path, text: str) -> Path:
    """:func:`write_bytes` for text (UTF-8)."""
    return write_bytes(path, text.encode("utf-8"))


def append_line(path: str | Path, line: str) -> None:
    """Append one line to a log that grows a line at a time (a study's record), flushed to the disk.
    A writer killed mid-line leaves a last line without its newline: it is cut off first, so that
    it never runs into the line appended after it."""
    path = Path(path)
    with open(path, "a+b") as file:
        file.seek(0)
        text = file.read()  # a study's record: kilobytes
        if text and not text.endswith(b"\n"):
            keep = text.rfind(b"\n") + 1
            warnings.warn(f"{path}: its last line was cut short (a writer killed mid-line); it is dropped",
                          RuntimeWarning, stacklevel=2)
            file.truncate(keep)
        file.write(line.encode("utf-8") + b"\n")
        file.flush()
        os.fsync(file.fileno())


def parse_lines(path: str | Path, lines: list, parse: Callable, *, first: int = 1, fix: str) -> list:
    """``parse(line)`` for each of a log's ``lines`` (line numbers from ``first``). A log grows a line at
    a time, so a last line that does not parse is one a killed writer cut short: it is dropped with a
    warning. Any other line that does not parse raises a ``ValueError`` naming the file, the line and
    ``fix``, what to do about it."""
    rows = []
    for number, line in enumerate(lines, start=first):
        try:
            rows.append(parse(line))
        except ValueError as error:  # json.JSONDecodeError included
            if number == first + len(lines) - 1:
                warnings.warn(f"{path}: its last line (line {number}) was cut short ({error}); it is dropped",
                              RuntimeWarning, stacklevel=3)
                break
            raise ValueError(f"{path}, line {number}, is damaged ({error}): {fix}") from error
    return rows


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}


def seal(folder: str | Path) -> Path:
    """Flush every file of ``folder`` to the disk, then write its manifest (the last write)."""
    folder = Path(folder)
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != MANIFEST:
            with open(path, "rb") as file:
                os.fsync(file.fileno())
    for sub in sorted(p for p in folder.rglob("*") if p.is_dir()):
        fsync_dir(sub)
    write_text(folder / MANIFEST, json.dumps({"files": _files(folder)}, indent=1))
    return folder


def unseal(folder: str | Path) -> None:
    """Withdraw ``folder``'s manifest before its files are rewritten in place (a trainer's output)."""
    manifest = Path(folder) / MANIFEST
    if manifest.exists():
        manifest.unlink()
        fsync_dir(manifest.parent)


def is_complete(folder: str | Path) -> bool:
    """Whether ``folder`` holds a manifest and every file it names, at its size."""
    manifest = Path(folder) / MANIFEST
    try:
        listed = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    for name, size in listed.items():
        try:
            if (Path(folder) / name).stat().st_size != size:
                return False
        except OSError:
            return False
    return True


def _staging(folder: Path) -> Path:
    return folder.with_name(folder.name + ".tmp")


def _older(folder: Path) -> Path:
    return folder.with_name(folder.name + ".old")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _swap_in(staging: Path, folder: Path) -> None:
    """Put the complete ``staging`` in ``folder``'s place; each step leaves a state :func:`recover` reads."""
    older = _older(folder)
    if older.exists():
        _remove(older)  # a leftover, older than folder
    if folder.exists():
        os.replace(folder, older)
    os.replace(staging, folder)
    fsync_dir(folder.parent)
    if older.exists():
        _remove(older)
        fsync_dir(folder.parent)


def recover(folder: str | Path) -> bool:
    """Bring ``folder`` back to its newest complete state after an interrupted write and delete the
    leftovers; returns whether a complete folder is there now. Safe to call from several processes
    (they take turns under the folder's lock) and at any time no writer holds that lock."""
    folder = Path(folder)
    staging, older = _staging(folder), _older(folder)
    if not (staging.exists() or older.exists()):  # the common case: nothing was interrupted
        return is_complete(folder)
    with folder_lock(folder):
        if is_complete(staging):  # built whole, not yet renamed into place: the newest state
            _swap_in(staging, folder)
        elif not is_complete(folder) and is_complete(older):  # died between the two renames
            if folder.exists():
                _remove(folder)
            os.replace(older, folder)
            fsync_dir(folder.parent)
        for leftover in (staging, older):
            if leftover.exists():
                _remove(leftover)
        return is_complete(folder)


def check_written(folder: str | Path) -> None:
    """For a reader of a folder that :func:`building` may have written (or any other program): recover
    it if it was interrupted, and refuse it if what is left is incomplete. A folder with no manifest
    and no leftovers beside it (a model saved by other code) is left to the reader."""
    folder = Path(folder)
    if not (_staging(folder).exists() or _older(folder).exists() or (folder / MANIFEST).exists()):
        return
    if not recover(folder):
        raise FileNotFoundError(f"{folder} was not written completely (the writer was interrupted, or its files "
                                "were changed since): delete it and write it again")


@contextlib.contextmanager
def building(folder: str | Path) -> Iterator[Path]:
    """Build ``folder`` anew in a staging folder (yielded); on leaving the block without an error,
    seal it and put it in ``folder``'s place whole, replacing an older one. On an error the staging
    folder is deleted and ``folder`` is left as it was."""
    folder = Path(folder)
    staging = _staging(folder)
    with folder_lock(folder):
        recover(folder)  # an earlier writer's leftovers go first
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        try:
            yield staging
            seal(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _swap_in(staging, folder)


def build_once(folder: str | Path, build: Callable[[Path], None]) -> Path:
    """``folder``, built by ``build(staging)`` unless a complete one is there already. Under the
    folder's lock: of several processes that ask at once, one builds and the others reuse its build."""
    folder = Path(folder)
    if recover(folder):
        return folder
    with folder_lock(folder):
        if not recover(folder):  # not built by another process while this one waited
            with building(folder) as staging:
                build(staging)
    return folder


def trainer_checkpoints(output_dir: str | Path) -> list[Path]:
    """A transformers ``Trainer``'s complete ``checkpoint-N`` folders in ``output_dir``, oldest first.

    The Trainer writes a checkpoint in place, file after file; :func:`sealing_callback` seals each
    one once the Trainer has written all of it. A folder without its seal (the run was killed while
    writing it, or while deleting an old one) is deleted here, so that a resumed run starts from
    the newest checkpoint that is whole.
    """
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    complete = []
    for folder in output_dir.glob("checkpoint-*"):
        if not (folder.is_dir() and folder.name.split("-")[-1].isdigit()):
            continue
        if is_complete(folder):
            complete.append(folder)
        else:  # (each process of a run may look: whichever deletes it first)
            shutil.rmtree(folder, ignore_errors=True)
    return sorted(complete, key=lambda folder: int(folder.name.split("-")[-1]))


def sealing_callback():
    """A ``TrainerCallback`` that seals each checkpoint the Trainer has just written (see
    :func:`trainer_checkpoints`); the process that saves seals."""
    from transformers import TrainerCallback

    class SealCheckpoints(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if args.should_save and folder.is_dir():
                seal(folder)
            return control

    return SealCheckpoints()
