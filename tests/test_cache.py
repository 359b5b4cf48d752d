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


def test_a_reader_waits_for_a_live_process_training_the_folder_in_stages(tmp_path):
    """Between two parts of a staged SFT run (chapter 4's cells) no lock is held: a reader
    (pipeline.sft_policy) waits while the process named in the folder's marker lives, and not for
    a dead one, nor for itself."""
    import json
    import os
    import socket
    import threading

    from tutorial_lib.data.sft import STAGED_RUN, staged_run_writer
    from tutorial_lib.pipeline import wait_for_staged_run

    folder = tmp_path / "sft" / "game-key"
    assert staged_run_writer(folder) is None
    wait_for_staged_run(folder, poll_seconds=0.01)  # nothing to wait for

    def mark(pid):
        write_text(folder / STAGED_RUN, json.dumps({"pid": pid, "host": socket.gethostname(),
                                                    "parts_done": 2, "parts": 4}))

    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        mark(writer.pid)
        assert staged_run_writer(folder)["pid"] == writer.pid
        said, done = [], threading.Event()
        waiter = threading.Thread(target=lambda: (wait_for_staged_run(folder, poll_seconds=0.02, log=said.append),
                                                  done.set()))
        waiter.start()
        assert not done.wait(0.5)  # still waiting while the writer lives
        assert len(said) == 1 and str(writer.pid) in said[0] and "2 of 4 parts" in said[0]
    finally:
        writer.kill()
        writer.wait()
    assert done.wait(10)  # the writer died: the reader goes on (and trains the checkpoint itself)
    waiter.join()
    assert len(said) == 1 and staged_run_writer(folder) is None
    mark(os.getpid())  # a staged run of this very process: waiting for it would never end
    wait_for_staged_run(folder, poll_seconds=0.01, log=said.append)
    assert len(said) == 1
    write_text(folder / STAGED_RUN, "{not json")  # a marker that cannot be read names no writer
    assert staged_run_writer(folder) is None
