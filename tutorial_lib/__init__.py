"""tutorial_lib: the library behind the book *LLM Policies for Text-Based RL*.

Packages by layer; each may import only those listed below it, and ``make test`` checks that
(``[tool.importlinter]`` in ``pyproject.toml``):

=============== ================================================================================
``book_tools``  the book's build: notebook and page checks, ``make book``'s executor, the smoke run
(top level)     ``presets`` (the ``ci``/``small``/``gpu``/``full`` scales; ``rl_settings``), ``pipeline`` (chapter results
                cached by their settings), ``comparison`` (REINFORCE, PPO, GRPO on one budget),
                ``report`` (sentences a run decides; recorded seeds), ``records`` (the
                benchmarks' run records, read and written), ``plotting``, ``exercises`` (the
                chapters' exercise checks), ``__main__`` (the command line)
``rl``          the RL loop, REINFORCE, PPO, GRPO, and the toolkit below them (chapters 5-7, 10)
``data``        expert transcripts, SFT (chapters 3-4); beside ``rl``, neither imports the other
``evaluation``  playing episodes, summaries (chapters 1, 8)
``lm``          loading models, the tiny model, prompts, tokens, sampling, policies (chapters 2, 9)
``envs``        the four games, action parsing, minimax (chapters 1-3)
``runtime``     device, CPU threads, cache, crash-safe writes, progress bars, metrics and checkpoints, processes
=============== ================================================================================

Each package's docstring lists its modules; each module's docstring names the chapter that teaches it.
"""

import warnings as _warnings

__version__ = "0.1.0"

# Libraries we use import ``tqdm.auto``, which warns in Jupyter when ipywidgets is missing and then
# falls back to text bars -- which is what the book wants. The warning says nothing to the reader.
_warnings.filterwarnings("ignore", message="IProgress not found")

# torch's thread count is part of what makes a run's numbers (tutorial_lib.runtime.cpu_threads): apply
# TUTORIAL_THREADS=<n> before anything imported from the library computes
from tutorial_lib.runtime import cpu_threads as _cpu_threads  # noqa: E402,F401
