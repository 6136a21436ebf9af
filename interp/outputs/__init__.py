"""What the analyses hand back and write: tidy tables, files, pages and figures.

:mod:`~interp.outputs.frames` (the tidy ``layer, head, label`` frame and its ``attrs``
schema), :mod:`~interp.outputs.tables` (export and read a table with how it was computed),
:mod:`~interp.outputs.files` (atomic writes, safetensors checkpoints),
:mod:`~interp.outputs.render` (offline circuitsvis pages) and :mod:`~interp.outputs.figures`
(matplotlib charts). The first three sit below the analyses; pages and figures above them.
"""
