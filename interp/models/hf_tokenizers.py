"""The tokenizer a Hugging Face model folder carries, read offline.

TransformerBridge needs a tokenizer object that was loaded from disk (it reads
``name_or_path``); with no tokenizer it tries the hub. For randomly
initialised configs (tests, benchmarks) :func:`word_tokenizer` builds a
whitespace word-level tokenizer ``t0 .. t{n-1}`` offline.

A folder must carry its tokenizer (:func:`folder_tokenizer`): without one,
prompts could not be encoded (Hugging Face builds an empty tokenizer for a
GPT-2 folder that has none, which encodes every prompt to nothing), so such a
folder is refused before its weights load, with the fix. A toy model whose
vocabulary is :func:`word_tokenizer`'s words says so in its ``config.json``
(``"interp_tokenizer": "word"``) and needs no tokenizer files.

Example:
    >>> word_tokenizer(30)("t5 t12")["input_ids"]
    [5, 12]
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from interp.core.errors import CheckpointError, InterpError
from interp.core.paths import cache_dir

# The files a saved Hugging Face tokenizer leaves in its folder (any one of them).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)
# config.json key of a toy folder whose vocabulary is word_tokenizer's t0 .. t{n-1}.
WORD_TOKENIZER_KEY = "interp_tokenizer"


def word_tokenizer(vocab_size: int) -> Any:
    """An offline word-level tokenizer over ``t0 .. t{vocab_size-1}`` (``t0`` is BOS, ``t1`` EOS).

    The special tokens are registered as whole words only, so ``t12`` is one
    token, not ``t1`` followed by ``2``.

    Raises:
        InterpError: for a vocabulary smaller than 2.
    """
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if vocab_size < 2:
        raise InterpError(f"vocab_size must be >= 2, got {vocab_size}")

    def special(t: str) -> AddedToken:
        return AddedToken(t, single_word=True, normalized=False)

    tk = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token=special("t0"),
        eos_token=special("t1"),
        unk_token=special("t0"),
        pad_token=special("t1"),
    )
    # TransformerBridge re-reads the tokenizer from its folder, so keep one on disk. The
    # folder name carries a version: v1 folders registered t0/t1 as substrings.
    target = cache_dir() / "tokenizers" / f"word-v2-{vocab_size}"
    if not (target / "tokenizer.json").is_file():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".word-"))
        except OSError as exc:
            raise InterpError(
                f"cannot write the tokenizer cache under {str(target.parent)!r} "
                f"({exc.strerror or exc}); set INTERP_CACHE to a writable folder"
            ) from None
        fast.save_pretrained(tmp)
        try:
            os.replace(tmp, target)  # atomic; a concurrent writer may have won
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return AutoTokenizer.from_pretrained(target)


def read_config(path: Path) -> dict[str, Any]:
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"{str(path / 'config.json')!r} is not valid JSON ({exc}); the model folder is damaged"
        ) from None
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise InterpError(
            f"{str(path)!r} has a config.json without model_type: it is neither an interp "
            "checkpoint nor a Hugging Face model folder"
        )
    return cfg


def folder_tokenizer(path: str | os.PathLike[str], config: dict[str, Any] | None = None) -> Any:
    """The tokenizer a Hugging Face model folder carries, loaded offline (no weights read).

    A folder whose ``config.json`` has ``"interp_tokenizer": "word"`` (a toy
    model over ``t0 .. t{vocab_size-1}``) gets :func:`word_tokenizer` and needs
    no tokenizer files; every other folder must hold its own tokenizer.

    Example:
        >>> import json, tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "config.json").write_text(json.dumps(
        ...     {"model_type": "gpt2", "vocab_size": 30, "interp_tokenizer": "word"}))
        >>> folder_tokenizer(d)("t5 t12")["input_ids"]
        [5, 12]

    Raises:
        InterpError: for a folder without tokenizer files (naming the files
            looked for and the fix: save the tokenizer into the folder), tokenizer
            files that cannot be loaded, a tokenizer that encodes text to no
            tokens (its vocabulary files are missing), or an unknown
            ``interp_tokenizer``.
        CheckpointError: for a ``config.json`` that is not valid JSON.
    """
    from transformers import AutoTokenizer

    d = Path(path)
    config = read_config(d) if config is None else config
    declared = config.get(WORD_TOKENIZER_KEY)
    if declared is not None:
        if declared != "word":
            raise InterpError(
                f"{str(d / 'config.json')!r} sets {WORD_TOKENIZER_KEY}={declared!r}; the only "
                'value is "word" (a toy vocabulary t0 .. tN); remove it to use the folder\'s '
                "own tokenizer files"
            )
        vocab = config.get("vocab_size")
        if not isinstance(vocab, int) or isinstance(vocab, bool):
            raise InterpError(
                f"{str(d / 'config.json')!r} declares the word tokenizer but its vocab_size is "
                f"{vocab!r}; give the vocabulary size as an integer"
            )
        return word_tokenizer(vocab)
    save = (
        "save the model's tokenizer into the folder (tokenizer.save_pretrained(folder)), "
        f'or, for a toy model over the words t0 .. tN, add "{WORD_TOKENIZER_KEY}": "word" '
        "to its config.json"
    )
    if not any((d / name).is_file() for name in TOKENIZER_FILES):
        raise InterpError(
            f"the model folder {str(d)!r} has no tokenizer files (none of "
            f"{', '.join(TOKENIZER_FILES)}), so prompts cannot be encoded; {save}"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - tokenizers, sentencepiece and HF each raise their own
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise InterpError(
            f"cannot load the tokenizer in {str(d)!r} ({type(exc).__name__}: {first}); its "
            f"tokenizer files are damaged or incomplete: {save}"
        ) from None
    if not list(tok("The cat sat", add_special_tokens=False)["input_ids"]):
        raise InterpError(
            f"the tokenizer in {str(d)!r} encodes text to no tokens (its vocabulary files are "
            f"missing: it has only some of {', '.join(TOKENIZER_FILES)}); {save}"
        )
    return tok
