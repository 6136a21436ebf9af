"""Pages built from analyses' results: offline HTML on :class:`interp.outputs.render.Report`.

:mod:`interp.outputs.pages.features`: a dictionary's features (contexts, density, logit
effects), with a slot for a head's top (query feature, key feature) pairs.
"""
