"""One word, one meaning: the vocabulary every function of `interp` uses.

This is the single source of the glossary: ``help(interp.analysis)`` shows it
(:func:`rst`) and the site's vocabulary page is it (:func:`markdown`, written into
``docs/vocabulary.md`` when the site is built).
``tests/test_signatures.py`` holds every public function to it: a parameter
named after a word here means that word, takes the values listed, and the
words under :data:`RETIRED` are never a parameter again.

Example:
    >>> "answer" in words() and "correct" in RETIRED
    True
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from interp.core.errors import InterpError

F = TypeVar("F", bound=Callable[..., Any])

GLOSSARY: dict[str, str] = {
    "model": "a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights "
    "(``interp.core.protocol.HookedModel``)",
    "tokens": "``[batch, pos]`` integer ids (``[pos]`` is one sequence); in patching, the "
    "clean prompt's",
    "corrupted_tokens": "the other prompt of a patching pair, the same shape as ``tokens``",
    "reference_tokens": "the sequences a mean or resample ablation draws from (default: the "
    "tokens)",
    "heads": "an iterable of ``(layer, head)`` pairs or ``'L1H4'`` labels; ``None`` is every "
    "head; duplicates collapse with a warning",
    "layer, head": "a block index and a head index (numpy integers accepted)",
    "stage": "a word-state or lens index: 0 = token embedding, ``l + 1`` = after block ``l``",
    "loss_mask": "``[batch, pos]`` bool: which positions count (the predictions a loss "
    "averages, the query rows a score averages)",
    "positions": "where an intervention *edits*: ints (negative from the end) or a ``[pos]`` "
    "bool mask; ``None`` is every position; in ``attribute_edges`` and ``evaluate_circuit``, "
    "``'each'`` makes every edge one edge per position (``a -> b @3``); in generation's "
    "interventions, ``'prompt'``, ``'new'`` or ``'all'`` (the prompt's tokens, the generated "
    "ones, both) or ints of the prompt's columns",
    "at": "where logits are *read* (DLA, the lens, ``logit_diff_metric``): an int or ints, "
    "negative from the end",
    "answer, wrong": "the token(s) a metric, DLA or lens follows (one for all sequences or "
    "one per sequence); by one rule in the API and on the CLI, an int or a string of digits "
    "is a token id, and any other string is text that must be one token (a multi-token "
    "string is an error naming its pieces)",
    "ablation": "what replaces an activation: ``'zero'``, ``'mean'`` (over the batch or "
    "``reference_tokens``), ``'resample'`` (another sequence's, seeded) or ``'patch'`` (the "
    "other run's, in ``direction``)",
    "method": "how a number is computed: ``'exact'`` (a forward pass per edit, equal to "
    "hooks), ``'attribution'`` (first order, one backward pass), ``'eap'``, ``'eap-ig'`` "
    "(edge attribution, integrated gradients)",
    "direction": "which run a patch edits: ``'noising'`` (the default: the corrupted run's "
    "activations into the clean run; does the metric *need* this?) or ``'denoising'`` (the "
    "clean run's into the corrupted run; is this *enough*?), Heimersheim and Nanda 2024. "
    "Noising is the default because ablations and circuit evaluation edit the clean run too, "
    "so every table's base run is the run ``tokens`` names",
    "effect": "``m(edited) - m(base run)``: the metric's change; the base run is the clean one "
    "except when denoising",
    "normalized": "``effect / (m(source run) - m(base run))``: 1 when a patch moves the "
    "metric all the way to the run it patches from, 0 when it does nothing; two runs whose "
    "metrics agree to 1e-5 relative (float rounding; 2 eps of a float16 / bfloat16 model's "
    "precision) are refused, not divided by",
    "faithfulness": "``(m_circuit - m_corrupted) / (m_clean - m_corrupted)``: 1 keeps the "
    "clean behaviour, 0 none of it",
    "component": "a named part of the model: a head's map for weight analyses (``'Q'``, "
    "``'K'``, ``'V'``; ``'O'``, ``'QK'``, ``'OV'`` for subspaces), an activation for patching "
    "(``'resid_pre'``, ``'attn_out'``, ``'mlp_out'``, ``'z'``, ``'q'``, ``'k'``, ``'v'``, "
    "``'pattern'``), a row's kind in a DLA table",
    "by": "what a table's row is: a patching grid's cells (``'layer'``, ``'layer_position'``, "
    "``'head'``, ``'head_position'``; k/v cells are key/value heads on grouped-query models), "
    "or a DLA row (``'head'``, ``'component'``, ``'layer'``)",
    "embedding": "``'token'`` or ``'positional'``, for weight-based circuit matrices",
    "offset": "how many positions a key is behind its query (``0`` = the same position); "
    "the QK circuit of a rotary model exists only at an offset",
    "max_offset": "the largest ``offset`` a positional kernel reports (default: the standard "
    "probe's, ``min(n_ctx, 101) - 1``)",
    "distribution": "the tokens a weight-based kernel averages over, query and key drawn "
    "independently: token ids (any shape; each occurrence counts once), ``'uniform'`` (every "
    "id) or ``'bias'`` (no token: the bias terms, and learned positions where the model has "
    "them)",
    "query_positions, key_positions": "the attending and the attended positions of a head's "
    "scores (ints, negative from the end, for every sequence; or one list per sequence, "
    "``[[q0], [q1], ...]``, read per sequence); read, not edited",
    "contrast": "two key positions ``(a, b)`` (one for all sequences or one per sequence): "
    "the score of ``a`` minus the score of ``b`` is attributed",
    "senders, receivers": "edge ends: ``embed``, ``pos_embed``, ``L0H1``, ``L3.mlp`` send; "
    "``L1H1.q``/``.k``/``.v`` (``L1KV0.k`` on grouped-query models; ``L1H1`` = its three "
    "inputs), ``L3.mlp``, ``logits`` receive",
    "edges": "a ``Circuit``, a ``[sender, receiver]`` bool mask, a table with ``sender`` and "
    "``receiver`` columns, ``'a -> b'`` labels or pairs; ``None`` is the whole graph",
    "stripes": "``'induction'``, ``'previous_token'``, ``'duplicate_token'``",
    "convention": "how a stripe becomes a score: ``'interp'``, ``'transformer_lens'``, "
    "``'arena'`` (docs/heads.md: stripe scores)",
    "metric": "a ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they "
    "read and check their ids) or any ``metric(logits, tokens) -> scalar``, always scored "
    "against the clean ``tokens``",
    "cache": "an ActivationCache of ``tokens``; it is read only after its earliest "
    "token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks are "
    "computed by one forward pass",
    "seed": "every random draw; the same seed gives the same numbers",
    "batch_size, memory_budget": "how many edits share a forward pass, and the bytes an "
    "analysis may hold beyond the model's weights: its prompts run in chunks, and its edits "
    "share passes, to stay under it (default: a quarter of the memory free on the model's "
    "device); chunks give the numbers of one batch for every metric that is a mean over "
    "prompts, and any other metric is refused when the prompts must be split",
    "estimate": "``True``: return an ``Estimate`` (chunks, peak bytes over the weights, "
    "forward-equivalents) instead of running; work that cannot fit is refused with it. A "
    "bool (numpy's too): strings and numbers are refused",
    "progress": "``True``: show a progress bar over chunks and passes, with an ETA. A bool, "
    "as ``estimate``",
    "prompt": "what ``generate`` continues: text (through the tokenizer, with its BOS), a list "
    "of texts, ``[batch, pos]`` ids or a list of id lists; prompts of different lengths are "
    "left-padded into one batch (a token's position counts only the real tokens before it)",
    "max_new_tokens": "the most tokens a generation adds to each prompt; the prompt and these "
    "must fit the context",
    "temperature, top_k, top_p": "how the next token is chosen: ``temperature=0`` is greedy "
    "(the argmax); above 0 the logits are divided by it and a token is drawn by ``seed`` from "
    "the ``top_k`` most likely and the smallest set whose probability reaches ``top_p`` (in "
    "(0, 1])",
    "stop": "a token, or a list of them (by the one rule for tokens), that ends a prompt's "
    "continuation: kept, then padding",
    "interventions": "the edits a generation applies to the prompt and every new token alike: "
    "``HeadAblation`` (``heads``, ``ablation``), ``Patch`` (from a source prompt's run), "
    "``Steering`` (a vector times a scale at a hook), ``UserHook``; each with its ``positions``",
    "kv_cache, keep_logits": "generate through the runtime's key/value cache (``False``: every "
    "pass over the whole sequence, the reference the cache is tested against); also return "
    "every step's logits",
}

# Words that had a second meaning once; no public parameter may use them again.
RETIRED: dict[str, str] = {
    "correct": "answer",
    "incorrect": "wrong",
    "position": "at (read) or positions (edited)",
    "unit": "by (a row's kind); attrs['unit'] is the measurement unit",
    "granularity": "by",
    "group": "groups (named head sets) or neuron_groups (MLP neuron ranges)",
}


def words() -> list[str]:
    """Every single word the glossary defines (``"answer, wrong"`` gives both)."""
    return [w.strip() for key in GLOSSARY for w in key.split(",")]


def markdown() -> str:
    """The glossary as the vocabulary page's Markdown table."""
    lines = ["| word | meaning |", "| --- | --- |"]
    for key, meaning in GLOSSARY.items():
        names = ", ".join(f"`{w.strip()}`" for w in key.split(","))
        lines.append(f"| {names} | {meaning.replace('``', '`')} |")
    return "\n".join(lines)


def rst() -> str:
    """The glossary as a reStructuredText definition list (``help(interp.analysis)``)."""
    lines = []
    for key, meaning in GLOSSARY.items():
        lines.append(", ".join(f"``{w.strip()}``" for w in key.split(",")))
        lines.append(f"    {meaning}")
    return "\n".join(lines)


def retired_words(**renamed: str) -> Callable[[F], F]:
    """Decorate a public function so that its parameters' old names get an
    :class:`~interp.core.errors.InterpError` naming the word the vocabulary uses now, not a raw
    ``TypeError``: ``renamed`` maps this function's own old names to their new ones
    (``method="ablation"``: ``method`` meant the ablation before it meant how a number is
    computed), and every word of :data:`RETIRED` the function does not take is covered too.
    The signature shown by ``help`` and :mod:`inspect` is the function's own.

    Example:
        >>> @retired_words(positions="at")
        ... def read(*, at=-1):
        ...     return at
        >>> read(positions=3)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        interp...InterpError: read() takes at= now (positions= was its old name); pass at=3

    Raises:
        InterpError: (from the decorated function) for a retired parameter name.
    """

    def wrap(fn: F) -> F:
        params = set(inspect.signature(fn).parameters)
        table = {w: RETIRED[w] for w in RETIRED if w not in params}
        table.update({old: new for old, new in renamed.items() if old not in params})

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            for old in kwargs.keys() & table.keys():
                new = table[old]
                if new.isidentifier():
                    message = f"takes {new}= now ({old}= was its old name); pass {new}="
                    message += repr(kwargs[old])
                else:
                    message = f"has no {old}= (the vocabulary retired the word): use {new}"
                raise InterpError(f"{fn.__name__}() {message}")
            return fn(*args, **kwargs)

        return call  # type: ignore[return-value]

    return wrap
