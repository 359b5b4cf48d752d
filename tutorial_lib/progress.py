"""Progress bars that read well both in a terminal and in the built book (all chapters).

In a terminal tqdm redraws one line in place. Where output is captured as text -- an executed
notebook in the book, a CI log -- every redraw becomes a new line, so there the bar prints at most
one line every 15 seconds.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from tqdm import tqdm


def progress_bar(iterable=None, **kwargs) -> tqdm:
    kwargs.setdefault("mininterval", 0.1 if sys.stderr.isatty() else 15.0)
    return tqdm(iterable, **kwargs)


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
