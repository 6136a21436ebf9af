"""Generation under interventions: what the model writes without a head, or with a nudge.

Every analysis elsewhere reads one forward pass; here the model writes.
:func:`generate` continues prompts token by token on every model kind, through
its runtime's key/value cache, greedy or sampled by seed, and applies
interventions to the prompt and every generated token the same way:

* :class:`HeadAblation`: heads' outputs replaced (``ablation='zero' | 'mean' |
  'resample'``, ``heads=``);
* :class:`Patch`: an activation copied from a run of another prompt;
* :class:`Steering`: a vector added at a hook, ``scale`` times, at the prompt's
  ``positions``, the new ones, or both;
* :class:`UserHook`: a hook of your own.

:func:`compare_generations` puts the clean and the edited continuations side by
side, each token scored under both models. Modules, one idea each:
:mod:`.prompts` (left-padded batches), :mod:`.sampling` (the next token),
:mod:`.interventions` and :mod:`.head_edits` (edits as hooks per pass),
:mod:`.loop` (the passes), :mod:`.generating` (checks, cost, chunks),
:mod:`.result` and :mod:`.compare` (what comes back).

Example:
    >>> from interp.models import load_model
    >>> model = load_model("induction-2l")
    >>> prompt = [[0, 28, 32, 10, 41, 50, 20, 8, 45, 28, 32, 10]]  # a segment, then its start
    >>> generate(model, prompt, max_new_tokens=2).new_tokens.tolist()
    [[41, 50]]
"""

from interp.analysis.generation.compare import compare_generations
from interp.analysis.generation.generating import generate, plan_generation
from interp.analysis.generation.head_edits import HeadAblation, Patch
from interp.analysis.generation.interventions import Intervention, Steering, UserHook
from interp.analysis.generation.result import Generation

__all__ = [
    "Generation",
    "HeadAblation",
    "Intervention",
    "Patch",
    "Steering",
    "UserHook",
    "compare_generations",
    "generate",
    "plan_generation",
]
