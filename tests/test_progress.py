import datasets
from transformers.utils import logging as hf_logging

from tutorial_lib.progress import progress_bar, quiet_transformers


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


def test_progress_bar_redraws_rarely_when_output_is_captured():
    import io

    bar = progress_bar(range(3), file=io.StringIO())
    assert bar.mininterval == 15.0  # pytest captures stderr, as a book build does
    assert list(bar) == [0, 1, 2]
