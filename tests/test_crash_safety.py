"""A run survives being killed at any instant (tutorial_lib.runtime.durable).

Two kinds of test. Fault injection: a forked copy of this process runs one writer and dies
(``os._exit``: no clean-up, no flush, as SIGKILL) just before its k-th file-system operation, for
every k; then this process reads what is left, as the next run would, and writes again. And real
kills: the command-line ``rl`` and ``sft`` runs are SIGKILLed at several instants and resumed,
and end with the weights of the run that was never interrupted (one thread: same arithmetic).
"""

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import torch

from tutorial_lib.runtime import durable
from tutorial_lib.runtime.tracking import MetricsLog, load_checkpoint, save_checkpoint

from .conftest import SMALL

KILLED = 137
#: the file-system operations a writer is killed before (shutil.rmtree, Path.mkdir/unlink/rename,
#: tempfile and fsync_dir go through these)
OPERATIONS = ("replace", "rename", "fsync", "unlink", "rmdir", "mkdir", "open")


def run_killed(write, die_at: int | None) -> int:
    """Run ``write()`` in a forked child that dies just before its ``die_at``-th file-system
    operation; returns how many operations it made when it was not killed (``die_at`` None)."""
    read, send = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: count, die at die_at, never return into pytest
        os.close(read)
        count = [0]

        def counting(original):
            def operation(*args, **kwargs):
                count[0] += 1
                if count[0] == die_at:
                    os._exit(KILLED)
                return original(*args, **kwargs)
            return operation

        try:
            for name in OPERATIONS:
                setattr(os, name, counting(getattr(os, name)))
            write()
            os.write(send, str(count[0]).encode())
            code = 0
        except BaseException as error:  # noqa: BLE001 - reported to the parent, which fails the test
            os.write(send, f"error {error!r}".encode())
            code = 1
        os._exit(code)
    os.close(send)
    _, status = os.waitpid(pid, 0)
    message = os.read(read, 10_000).decode()
    os.close(read)
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, KILLED), f"the writer failed on its own: {message}"
    if die_at is None:
        assert code == 0, message
        return int(message)
    return -1 if code == KILLED else int(message)


def every_crash_point(write) -> range:
    operations = run_killed(write, None)
    assert operations >= 3, "the writer made too few file-system operations to be tested"
    return range(1, operations + 1)


def _model(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_a_checkpoint_killed_at_any_operation_of_its_replacement_resumes_and_writes_again(tmp_path):
    by_step = {step: _model(step) for step in (1, 2, 3)}
    for k in every_crash_point(lambda: save_checkpoint(tmp_path / "probe" / "checkpoint", *by_step[2], step=2)):
        folder = tmp_path / f"k{k}" / "checkpoint"
        save_checkpoint(folder, *by_step[1], step=1)
        run_killed(partial(save_checkpoint, folder, *by_step[2], step=2), k)
        model, optimizer = _model(0)
        step, _ = load_checkpoint(folder, model, optimizer)  # the next process resumes...
        assert step in (1, 2) and _same(model, by_step[step][0]), f"killed at operation {k}"
        save_checkpoint(folder, *by_step[3], step=3)  # ...and its next checkpoint is written
        assert load_checkpoint(folder, model, optimizer)[0] == 3 and _same(model, by_step[3][0])
        leftovers = sorted(p.name for p in folder.parent.iterdir() if p.name != ".checkpoint.lock")
        assert leftovers == ["checkpoint"], f"killed at operation {k}: {leftovers}"


def test_the_first_checkpoint_killed_while_written_is_no_checkpoint(tmp_path):
    model, optimizer = _model(1)
    for k in every_crash_point(lambda: save_checkpoint(tmp_path / "probe" / "checkpoint", model, optimizer, step=1)):
        folder = tmp_path / f"k{k}" / "checkpoint"
        run_killed(partial(save_checkpoint, folder, model, optimizer, step=1), k)
        try:
            assert load_checkpoint(folder, *_model(0))[0] == 1  # it was whole before the kill
        except FileNotFoundError as error:  # or there is none, and the message says what to do
            assert "start without --resume" in str(error)
        save_checkpoint(folder, model, optimizer, step=2)
        assert load_checkpoint(folder, *_model(0))[0] == 2


def test_metrics_killed_while_a_row_is_written_keep_every_whole_row(tmp_path):
    def three_rows(folder):
        log = MetricsLog(folder, tensorboard=False)
        for step in (1, 2, 3):
            log.write(step, {"mean_return": step / 10})
        return log

    def fourth(folder):
        return lambda: MetricsLog(folder, tensorboard=False, resume_from=3).write(4, {"mean_return": 0.4, "new": 1.0})

    for k in every_crash_point(fourth(tmp_path / "probe")):
        folder = tmp_path / f"k{k}"
        three_rows(folder)
        run_killed(fourth(folder), k)
        rows = MetricsLog(folder, tensorboard=False, resume_from=4).rows
        assert [row["step"] for row in rows] in ([1, 2, 3], [1, 2, 3, 4]), f"killed at operation {k}"
        MetricsLog(folder, tensorboard=False, resume_from=4).write(5, {"mean_return": 0.5})
        assert [p.name for p in folder.iterdir()] == ["metrics.csv"]


def test_a_file_written_whole_is_the_old_one_or_the_new_one(tmp_path):
    path = tmp_path / "data.jsonl"
    old, new = "a\n" * 1000, "b\n" * 2000
    for k in every_crash_point(lambda: durable.write_text(tmp_path / "probe.jsonl", new)):
        durable.write_text(path, old)
        run_killed(lambda: durable.write_text(path, new), k)
        assert path.read_text() in (old, new)
        durable.write_text(path, new)
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging file left


def test_a_folder_replaced_whole_is_the_old_one_or_the_new_one_wherever_its_writer_died(tmp_path):
    def write(folder, text):
        def build():
            with durable.building(folder) as staging:
                (staging / "weights.bin").write_text(text * 100)
                (staging / "sub").mkdir()
                (staging / "sub" / "config.json").write_text(json.dumps({"text": text}))
        return build

    for k in every_crash_point(write(tmp_path / "probe", "new")):
        folder = tmp_path / f"k{k}" / "cache"
        write(folder, "old")()
        run_killed(write(folder, "new"), k)
        assert durable.recover(folder), f"killed at operation {k}: no complete folder"
        text = json.loads((folder / "sub" / "config.json").read_text())["text"]
        assert text in ("old", "new") and (folder / "weights.bin").read_text() == text * 100
        write(folder, "newer")()
        assert sorted(p.name for p in folder.parent.iterdir()) == [".cache.lock", "cache"], f"killed at operation {k}"


def test_a_final_model_killed_while_replaced_loads_old_or_new_and_is_written_again(tmp_path, tiny_cache):
    from tutorial_lib.lm.models import load_policy
    from tutorial_lib.rl.rl_loop import save_final_model

    old, new = load_policy("tiny", tiny_config=SMALL), load_policy("tiny", tiny_config=SMALL)
    with torch.no_grad():
        for parameter in new.model.parameters():
            parameter.add_(1.0)
    crash_points = every_crash_point(lambda: save_final_model(new, tmp_path / "probe"))
    # every operation of the protocol is killed in the test above; here a spread of them, the last
    # ones (the swap) included
    for k in sorted({*crash_points[::4], *crash_points[-4:]}):
        run_dir = tmp_path / f"k{k}"
        save_final_model(old, run_dir)
        run_killed(partial(save_final_model, new, run_dir), k)
        durable.check_written(run_dir / "model")  # what load_policy does first: recovers, or refuses
        found = _weights(run_dir / "model")
        assert any(found.keys() == dict(policy.model.named_parameters()).keys() - {"lm_head.weight"}
                   and all(torch.equal(found[key], policy.model.state_dict()[key]) for key in found)
                   for policy in (old, new)), f"killed at operation {k}"
        save_final_model(new, run_dir)
        assert _same(load_policy(str(run_dir)).model, new.model)  # the run's folder, as `evaluate --policy` reads it


def test_a_tiny_model_build_killed_is_built_again_not_trusted(tmp_path, monkeypatch):
    from tutorial_lib.lm.models import load_policy
    from tutorial_lib.lm.tiny_model import tiny_model_dir

    monkeypatch.setenv("TUTORIAL_CACHE", str(tmp_path / "whole"))
    crash_points = every_crash_point(lambda: tiny_model_dir(SMALL))  # the build the others are compared with
    reference = load_policy("tiny", tiny_config=SMALL).model
    # a build takes seconds: killed while building, while sealing, and between sealing and the rename
    # (the protocol itself is killed at every operation above)
    for k in (len(crash_points) // 2, crash_points[-2], crash_points[-1]):
        monkeypatch.setenv("TUTORIAL_CACHE", str(tmp_path / f"k{k}"))
        run_killed(lambda: tiny_model_dir(SMALL), k)
        assert _same(load_policy("tiny", tiny_config=SMALL).model, reference), f"killed at operation {k}"


def test_a_folder_whose_files_do_not_match_its_seal_is_not_trusted(tmp_path):
    with durable.building(tmp_path / "cache") as staging:
        (staging / "weights.bin").write_bytes(b"x" * 100)
    assert durable.recover(tmp_path / "cache")
    (tmp_path / "cache" / "weights.bin").write_bytes(b"x" * 50)  # cut short by something else
    assert not durable.recover(tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="delete it and write it again"):
        durable.check_written(tmp_path / "cache")


# ---- damaged files: errors that name the file and say what to do ----

def test_a_damaged_checkpoint_is_a_clear_error(tmp_path):
    model, optimizer = _model(1)
    folder = save_checkpoint(tmp_path / "checkpoint", model, optimizer, step=1)
    state = folder / "training_state.pt"
    state.write_bytes(state.read_bytes()[:100])  # cut short: its size no longer matches the seal
    with pytest.raises(ValueError, match=r"incomplete.*delete .*checkpoint"):
        load_checkpoint(folder, model, optimizer)
    durable.seal(folder)  # garbage of a sealed size: torch cannot read it
    with pytest.raises(ValueError, match=r"cannot be read.*damaged; delete"):
        load_checkpoint(folder, model, optimizer)


def test_expert_data_cut_in_the_middle_of_a_line_is_a_clear_error(tmp_path):
    from tutorial_lib.data.expert_data import load_examples, save_examples

    path = save_examples([{"prompt": "p", "completion": "c"}] * 3, tmp_path / "data.jsonl")
    path.write_text(path.read_text()[:-10])
    with pytest.raises(ValueError, match=r"data.jsonl, line 3, is not a whole example.*delete it"):
        load_examples(path)


def test_metrics_with_a_torn_last_row_drop_it_and_a_damaged_middle_row_is_a_clear_error(tmp_path):
    log = MetricsLog(tmp_path, tensorboard=False)
    for step in (1, 2, 3):
        log.write(step, {"mean_return": step / 10})
    text = (tmp_path / "metrics.csv").read_text()
    (tmp_path / "metrics.csv").write_text(text[: text.rindex(",")])  # the last row lost its last field
    with pytest.warns(RuntimeWarning, match="line 4.*cut short"):
        assert [row["step"] for row in MetricsLog(tmp_path, tensorboard=False, resume_from=3).rows] == [1, 2]
    (tmp_path / "metrics.csv").write_text("step,mean_return\n1,0.1\n2,zz\n3,0.3\n")
    with pytest.raises(ValueError, match=r"metrics.csv, line 3, is damaged.*--resume"):
        MetricsLog(tmp_path, tensorboard=False, resume_from=3)


# ---- real kills of the command line ----

def _cli(*argv, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "TUTORIAL_THREADS": "1", "TUTORIAL_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "tutorial_lib", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _kill_when(process: subprocess.Popen, ready, what: str) -> None:
    """SIGKILL ``process`` as soon as ``ready()`` holds (polled every millisecond)."""
    deadline = time.monotonic() + 300
    while not ready():
        assert process.poll() is None, f"the run ended before {what}: {process.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.001)
    process.send_signal(signal.SIGKILL)
    process.wait()


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(next(folder.glob("*.safetensors")))


@pytest.mark.slow
def test_rl_killed_at_several_instants_resumes_to_the_weights_of_the_run_never_killed(tmp_path, tiny_cache,
                                                                                     small_policy_dir):
    def rl(out: Path, resume: bool) -> subprocess.Popen:
        return _cli("rl", "--game", "guess_the_number", "--preset", "ci", "--init", str(small_policy_dir),
                    "--out", str(out), "--iterations", "5", "--turns-per-iteration", "8", "--save-every", "1",
                    "--quiet", *(["--resume"] if resume else []), cache=tiny_cache)

    straight = _finish(rl(tmp_path / "straight", resume=False))
    out = tmp_path / "killed"
    checkpoint = out / "checkpoint"

    def step() -> int:
        try:
            return json.loads((checkpoint / "step.json").read_text())["step"]
        except (OSError, ValueError):
            return 0

    first = rl(out, resume=False)
    _kill_when(first, lambda: step() >= 1, "the first checkpoint")  # in the iteration after a checkpoint
    second = rl(out, resume=True)
    # in the middle of replacing a checkpoint: its staging folder is there
    # in the middle of replacing a checkpoint (its staging folder is there), if the poll catches one;
    # else once the third is written
    _kill_when(second, lambda: ((out / "checkpoint.tmp").exists() and step() >= 2) or step() >= 3,
               "a checkpoint being written")
    third = rl(out, resume=True)
    _kill_when(third, lambda: (out / "checkpoint.old").exists() or step() >= 4, "a checkpoint being replaced")
    resumed = _finish(rl(out, resume=True))
    assert resumed["iterations"] == straight["iterations"] == 5
    a, b = _weights(tmp_path / "straight" / "model"), _weights(out / "model")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # one thread, same arithmetic: bitwise
    assert (out / "metrics.csv").read_text().count("\n") == 6  # header + one row per iteration, none twice


@pytest.mark.slow
def test_sft_killed_at_several_instants_resumes_to_the_weights_of_the_run_never_killed(tmp_path, tiny_cache):
    examples = [{"prompt": f"Guess {n}", "completion": f"\\boxed{{{n}}}"} for n in range(40)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in examples))

    def sft(out: Path, resume: bool) -> subprocess.Popen:
        return _cli("sft", "--game", "guess_the_number", "--preset", "ci", "--data", str(data), "--out", str(out),
                    "--max-steps", "12", "--save-steps", "2", "--quiet", *(["--resume"] if resume else []),
                    cache=tiny_cache)

    straight = _finish(sft(tmp_path / "straight", resume=False))
    out = tmp_path / "killed"

    def saved(step: int) -> bool:
        return durable.is_complete(out / f"checkpoint-{step}")

    first = sft(out, resume=False)
    _kill_when(first, lambda: saved(2), "checkpoint-2")
    assert not durable.recover(out)  # a killed run's folder is not a model a chapter would load
    second = sft(out, resume=True)
    # while checkpoint-6 is written, if the poll catches it; else once checkpoint-8 is whole
    _kill_when(second, lambda: ((out / "checkpoint-6").exists() and not saved(6)) or saved(8),
               "checkpoint-6 being written")
    third = sft(out, resume=True)
    _kill_when(third, lambda: saved(10), "checkpoint-10")
    resumed = _finish(sft(out, resume=True))
    assert resumed["steps"] == straight["steps"] == 12
    a, b = _weights(tmp_path / "straight"), _weights(out)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert durable.is_complete(out)


def test_a_record_killed_mid_line_loses_that_line_only_and_the_next_run_appends_cleanly(tmp_path, monkeypatch):
    from tutorial_lib import records

    path = tmp_path / "seeds.jsonl"
    records.record_run({"seed": 0, "cpu": "x"}, path)
    with path.open("a") as f:
        f.write('{"seed": 1, "cp')  # a writer killed mid-line
    with pytest.warns(RuntimeWarning, match="cut short"):
        assert records.read_json_lines(path) == [{"seed": 0, "cpu": "x"}]
    with pytest.warns(RuntimeWarning, match="cut short"):
        records.record_run({"seed": 2, "cpu": "x"}, path)
    assert records.read_json_lines(path) == [{"seed": 0, "cpu": "x"}, {"seed": 2, "cpu": "x"}]
    path.write_text('{"seed": 0}\n{"seed": 1\n{"seed": 2}\n')
    with pytest.raises(ValueError, match="seeds.jsonl, line 2, is damaged"):
        records.read_json_lines(path)
