"""The cache's writes are whole and its folders lockable: `make book` runs two chapters at once, and
both may read or write the same expert data or SFT checkpoint."""

import subprocess
import sys

import pytest

from tutorial_lib.data.expert_data import load_examples, save_examples
from tutorial_lib.runtime.cache import folder_lock
from tutorial_lib.runtime.durable import write_bytes, write_text


def test_write_text_replaces_the_file_and_leaves_nothing_else(tmp_path):
    path = write_text(tmp_path / "deep" / "a.json", "old")
    write_text(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in path.parent.iterdir()] == ["a.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = write_text(tmp_path / "a.json", "old")
    with pytest.raises(TypeError):
        write_bytes(path, 42)  # not bytes: fails while writing the temporary file
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_saved_examples_round_trip(tmp_path):
    examples = [{"prompt": "p\nq", "completion": "c"}, {"prompt": "r", "completion": "d"}]
    path = save_examples(examples, tmp_path / "x" / "data.jsonl")
    assert load_examples(path).to_list() == examples


def test_a_locked_folder_makes_another_process_wait(tmp_path):
    folder = tmp_path / "sft" / "game-key"
    probe = ("import sys, filelock\n"
             "from tutorial_lib.runtime.cache import folder_lock\n"
             "lock = folder_lock(sys.argv[1])\n"
             "try:\n    lock.acquire(timeout=0.5)\nexcept filelock.Timeout:\n    sys.exit(3)\nsys.exit(0)\n")
    with folder_lock(folder):
        with folder_lock(folder):  # re-entrant: sft_policy holds it while train_sft takes it again
            held = subprocess.run([sys.executable, "-c", probe, str(folder)], timeout=60)
    free = subprocess.run([sys.executable, "-c", probe, str(folder)], timeout=60)
    assert held.returncode == 3 and free.returncode == 0
