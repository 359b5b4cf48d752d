"""The book's build tooling and the checks its chapters run, not part of the library a reader
trains with: ``book`` (checks of the notebooks and the built pages, cell timings),
``book_execute`` (``make book``'s chapters, two at a time, into the build's cache), ``smoke``
(every command-line stage at ``full``, ``make smoke-full``), ``split_update`` (one REINFORCE and
one PPO update on one process and on several, compared: chapter 10 runs it, ``make test`` checks
it). Nothing in ``tutorial_lib`` imports it (a contract checked by ``make test``).
"""
