"""Progress bars that read well both in a terminal and in the built book (all chapters).

In a terminal tqdm redraws one line in place. Where output is captured as text -- an executed
notebook in the book, a CI log -- every redraw becomes a new line, so there the bar prints at most
one line every 15 seconds.
"""

from __future__ import annotations

import sys

from tqdm import tqdm


def progress_bar(iterable=None, **kwargs) -> tqdm:
    kwargs.setdefault("mininterval", 0.1 if sys.stderr.isatty() else 15.0)
    return tqdm(iterable, **kwargs)
