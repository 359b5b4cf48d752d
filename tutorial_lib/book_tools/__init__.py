"""The book's build tooling, not part of the library a reader uses: ``book`` (checks of the
notebooks and the built pages, cell timings), ``book_execute`` (``make book``'s chapters, two at a
time, into the build's cache), ``smoke`` (every command-line stage at ``full``, ``make
smoke-full``). Nothing in ``tutorial_lib`` imports it (a contract checked by ``make test``).
"""
