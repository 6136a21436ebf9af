"""Sparse dictionaries (sparse autoencoders): read, write, splice into a model and train.

:class:`Dictionary` holds the tensors in sae-lens' layout (``W_enc [d_in, d_sae]``,
``b_enc``, ``W_dec [d_sae, d_in]``, ``b_dec``, ``threshold`` for jumprelu) with its hook
name and architecture.
"""

from interp.dictionaries.dictionary import ARCHITECTURES, Dictionary, architecture_name

__all__ = ["ARCHITECTURES", "Dictionary", "architecture_name"]
