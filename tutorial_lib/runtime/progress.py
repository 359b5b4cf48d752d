"""Progress bars that read well both in a terminal and in the built book (all chapters).

In a terminal tqdm redraws one line in place. Where output is captured as text -- an executed
notebook in the book, a CI log -- every redraw becomes a new line, and a three-minute loop left a
dozen lines of stale bars in a chapter; there the bar draws nothing while it runs and writes one
line, its final state (count, time, rate), when it closes.
"""

from __future__ import annotations

import io
import sys
from contextlib import contextmanager

from tqdm import tqdm


class FinalLineBar(tqdm):
    """A tqdm bar for captured output: silent while it runs, one line (its final state) at close."""

    def __init__(self, *args, file=None, **kwargs) -> None:
        self._target = file or sys.stderr
        super().__init__(*args, file=io.StringIO(), **kwargs)  # tqdm's own redraws go nowhere

    def close(self) -> None:
        if self.disable:  # closed already, or disabled by the caller
            return super().close()
        line = str(self)
        super().close()
        print(line, file=self._target, flush=True)


def progress_bar(iterable=None, **kwargs) -> tqdm:
    """A progress bar: tqdm's own in a terminal, a :class:`FinalLineBar` where output is captured."""
    target = kwargs.get("file") or sys.stderr
    if target.isatty():
        kwargs.setdefault("mininterval", 0.1)
        return tqdm(iterable, **kwargs)
    return FinalLineBar(iterable, **kwargs)


@contextmanager
def quiet_transformers(progress_bars: bool = False):
    """Within the block, transformers logs only errors and (by default) neither transformers nor
    ``datasets`` draws progress bars; the previous settings come back afterwards. For steps that are
    not the chapter's point (saving a 1 MB model, the Trainer's informational lines, TRL's passes
    over a dataset of a few thousand rows)."""
    import datasets
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    dataset_bars = datasets.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    if not progress_bars:
        hf_logging.disable_progress_bar()
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
        if dataset_bars:
            datasets.enable_progress_bars()
