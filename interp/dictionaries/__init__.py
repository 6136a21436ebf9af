"""Sparse dictionaries (sparse autoencoders): read, write, splice into a model and train.

:class:`Dictionary` holds the tensors in sae-lens' layout (``W_enc [d_in, d_sae]``,
``b_enc``, ``W_dec [d_sae, d_in]``, ``b_dec``, ``threshold`` for jumprelu) with its hook
name and architecture; :func:`load_dictionary` / :meth:`Dictionary.save` read and write
sae-lens folders (and Gemma Scope npz files); :class:`Splice` / :func:`spliced` put one
into a model at its hook with its error term kept as a node; :func:`train_dictionary`
trains a TopK dictionary on a hook's activations and :func:`dictionary_report` scores one;
:func:`read_features` reads what each feature does (top contexts, density, logit effects).
:class:`Transcoder` reads one hook (an MLP's input) and writes another (its output);
:func:`load_transcoder` / :func:`load_circuit_tracer_transcoder` read sae-lens folders and
circuit-tracer's per-layer files; :func:`train_transcoder` (or ``train_dictionary(...,
target_hook=...)``) trains a TopK one and :func:`transcoder_report` scores it.
"""

from interp.dictionaries.dictionary import ARCHITECTURES, Dictionary, architecture_name
from interp.dictionaries.files import load_dictionary
from interp.dictionaries.reading import (
    FeatureReading,
    feature_logit_effects,
    read_features,
    token_strings,
)
from interp.dictionaries.report import DictionaryReport, dictionary_report
from interp.dictionaries.sae_lens import dictionary_config, save_dictionary
from interp.dictionaries.splice import Splice, check_dictionary, check_hook, hook_width, spliced
from interp.dictionaries.train import TrainedDictionary, default_lr, train_dictionary
from interp.dictionaries.train_transcoder import train_transcoder
from interp.dictionaries.transcoder import Transcoder
from interp.dictionaries.transcoder_files import (
    load_circuit_tracer_transcoder,
    load_transcoder,
    save_transcoder,
    transcoder_config,
)
from interp.dictionaries.transcoder_report import check_transcoder, transcoder_report

__all__ = [
    "ARCHITECTURES",
    "Dictionary",
    "DictionaryReport",
    "FeatureReading",
    "Splice",
    "TrainedDictionary",
    "Transcoder",
    "architecture_name",
    "check_dictionary",
    "check_hook",
    "check_transcoder",
    "default_lr",
    "dictionary_config",
    "dictionary_report",
    "feature_logit_effects",
    "hook_width",
    "load_circuit_tracer_transcoder",
    "load_dictionary",
    "load_transcoder",
    "read_features",
    "save_dictionary",
    "save_transcoder",
    "spliced",
    "token_strings",
    "train_dictionary",
    "train_transcoder",
    "transcoder_config",
    "transcoder_report",
]
