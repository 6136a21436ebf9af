"""The one exception type `interp` raises for bad input.

Every check that can fail because of what the caller passed raises
:class:`InterpError` with a message that names the problem and the fix. It
subclasses :class:`ValueError` so generic ``except ValueError`` code keeps
working.
"""

from __future__ import annotations


class InterpError(ValueError):
    """Bad input to an `interp` function: the message says what is wrong and how to fix it."""


class CheckpointError(InterpError):
    """A checkpoint file is missing, truncated, corrupt or does not match its config."""
