import datasets
from transformers.utils import logging as hf_logging

from tutorial_lib.runtime.progress import progress_bar, quiet_transformers


def test_quiet_transformers_restores_what_was_there():
    hf_logging.set_verbosity_info()
    hf_logging.enable_progress_bar()
    try:
        with quiet_transformers():
            assert hf_logging.get_verbosity() == hf_logging.ERROR
            assert not hf_logging.is_progress_bar_enabled() and not datasets.is_progress_bar_enabled()
        assert hf_logging.get_verbosity() == hf_logging.INFO and hf_logging.is_progress_bar_enabled()
        assert datasets.is_progress_bar_enabled()
        with quiet_transformers(progress_bars=True):
            assert hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.set_verbosity_warning()


def test_captured_progress_is_one_line_with_the_final_count():
    import io
    import time

    out = io.StringIO()  # captured, as a book build captures stderr
    bar = progress_bar(total=5, desc="games", file=out, mininterval=0)
    for _ in range(5):
        time.sleep(0.01)
        bar.update(1)
    assert out.getvalue() == ""  # nothing while it runs
    bar.close()
    bar.close()  # a second close (tqdm's __del__ does one) adds nothing
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("games") and "5/5" in lines[0]
    assert list(progress_bar(range(3), file=io.StringIO())) == [0, 1, 2]
    assert progress_bar(range(3), file=io.StringIO(), disable=True).disable
