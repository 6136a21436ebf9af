"""Sparse dictionaries (sparse autoencoders): read, write, splice into a model and train.

:class:`Dictionary` holds the tensors in sae-lens' layout (``W_enc [d_in, d_sae]``,
``b_enc``, ``W_dec [d_sae, d_in]``, ``b_dec``, ``threshold`` for jumprelu) with its hook
name and architecture.
"""

from interp.dictionaries.dictionary import ARCHITECTURES, Dictionary, architecture_name
from interp.dictionaries.files import dictionary_config, load_dictionary, save_dictionary
from interp.dictionaries.splice import Splice, check_dictionary, hook_width, spliced

__all__ = [
    "ARCHITECTURES",
    "Dictionary",
    "Splice",
    "architecture_name",
    "check_dictionary",
    "dictionary_config",
    "hook_width",
    "load_dictionary",
    "save_dictionary",
    "spliced",
]
