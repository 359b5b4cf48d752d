"""tutorial_lib: the library behind the book *LLM Policies for Text-Based RL*.

Each module's docstring names the chapter that teaches it:

=================== ==========================================================
``envs``            the four text games and ``make`` (chapter 1)
``episodes``        the game loop: many episodes side by side, ``EpisodeRecord`` (chapter 1)
``evaluate``        episodes summarised into rates; math accuracy (chapter 1)
``minimax``         the minimax player: perfect tic-tac-toe (chapters 1, 3, 7)
``parsing``         reading actions out of model text (chapter 2)
``prompts``         prompt templates and history windows (chapter 2)
``tokenization``    prompt/completion tensors, loss masks, padding (chapter 2)
``tiny_model``      the offline tiny model and its tokenizer (chapter 2)
``models``          ``load_policy``: tiny, offline SmolLM2 or hub, LoRA, 4-bit (chapters 2, 9)
``policies``        random, expert and language-model policies (chapters 1-2)
``lm_parts``        a model as body + output layer, through LoRA's wrapper (chapters 4-8)
``device``          CUDA / TPU / MPS / CPU in one place (chapter 2)
``cpu_threads``     torch's CPU thread count, fixed per process (all chapters)
``cache``           where built models, data, checkpoints and runs are kept (all chapters)
``presets``         the ``ci``, ``small`` and ``full`` scales (all chapters)
``plotting``        the book's charts (all chapters)
``report``          sentences a chapter's own results decide; recorded seeds (all chapters)
``expert_data``     MCTS self-play, symmetries, expert transcripts (chapter 3)
``sft``             supervised fine-tuning through TRL, in resumable parts (chapter 4)
``pipeline``        chapter results cached by their settings (chapters 3-7)
``sampling``        sampling presets; the token sampler inside ``generate`` (chapters 2, 5)
``rollout``         batched collection; ``TurnBatch``; scoring actions (chapters 5-8)
``advantages``      discounted returns, ReBN, GAE, group normalisation (chapters 5-7)
``rl_loop``         the collect-then-update loop every RL algorithm shares (chapters 5-7)
``reinforce``       REINFORCE with return batch-normalisation (chapter 5)
``ppo``             PPO with a value head (chapter 6)
``grpo``            GRPO through TRL's ``GRPOTrainer`` (chapter 7)
``tictactoe_moves`` single tic-tac-toe moves scored by a solver, for GRPO (chapter 7)
``comparison``      REINFORCE, PPO and GRPO on one budget (chapter 7)
``tracking``        metrics to CSV / TensorBoard, resumable checkpoints (chapter 5)
``__main__``        the command line: data, sft, evaluate, rl (chapters 3-5)
``smoke``           every command-line stage at ``full``, smallest counts (``make smoke-full``)
``progress``        progress bars for terminals and the built book (all chapters)
``book``            checks of the book's files and pages (not a chapter)
``book_execute``    ``make book``'s chapters, two at a time, into the build's cache (not a chapter)
=================== ==========================================================
"""

import warnings as _warnings

__version__ = "0.1.0"

# Libraries we use import ``tqdm.auto``, which warns in Jupyter when ipywidgets is missing and then
# falls back to text bars -- which is what the book wants. The warning says nothing to the reader.
_warnings.filterwarnings("ignore", message="IProgress not found")

# torch's thread count is part of what makes a run's numbers (tutorial_lib.cpu_threads): apply
# TUTORIAL_THREADS=<n> before anything imported from the library computes
from . import cpu_threads as _cpu_threads  # noqa: E402,F401
