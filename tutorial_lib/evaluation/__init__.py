"""Playing a policy on a game and summarising what happened (chapters 1 and 8).

Modules: ``episodes`` (the game loop: many episodes side by side, ``EpisodeRecord``), ``evaluate``
(episodes summarised into rates; math accuracy), ``generalisation_gap`` (why evaluation lags
training: the gap split into its terms, read into sentences; gold-path lengths), ``parity``
(whether evaluation and training rebuild the data's prompts and the sampler's tokens), ``stats``
(whether a change is more than noise: two standard errors, verdicts). May import ``runtime``,
``envs`` and ``lm``; nothing of ``data`` or ``rl``.
"""
