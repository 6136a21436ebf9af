"""Training the models the labs open: :mod:`~interp.training.induction` (the two-layer
attention-only induction model, on the runtime's one loop)."""
