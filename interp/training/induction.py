"""Train a two-layer attention-only model to form an induction circuit.

The model (:class:`~interp.models.attn_only.AttnOnlyTransformer`) is trained
from scratch on :func:`~interp.datasets.repeated_tokens` sequences with random
segment lengths and offsets, with next-token cross-entropy on every position.
A fixed held-out batch uses segment lengths never seen in training, and the
progress bar shows the loss and the current best layer-1 induction score on
it.

Determinism: the initial weights come from a generator seeded with ``seed``,
and the training batches from a second generator seeded with ``seed + 1``;
nothing reads the global RNG, so the same config gives the same model.

:func:`save_result` writes the result as a verified checkpoint
(:mod:`interp.models.checkpoints`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.protocol import eval_no_grad
from interp.datasets import HELD_OUT_LENGTHS, TRAIN_LENGTHS, repeated_tokens
from interp.models.attn_only import AttnOnlyConfig, AttnOnlyTransformer
from interp.models.checkpoints import save_checkpoint


@dataclasses.dataclass(frozen=True)
class InductionTrainConfig:
    """Model sizes, data settings and optimiser settings for :func:`train_induction`.

    The defaults reproduce the shipped ``induction-2l`` checkpoint.

    Attributes:
        n_layers: Blocks of the attention-only model (default 2).
        n_heads: Heads per block (default 2).
        d_model: Residual stream width (default 128).
        d_head: Width of each head (default 32).
        d_vocab: Vocabulary size (default 64).
        n_ctx: Context length, and the length of every training sequence (default 48).
        steps: Optimiser steps (at least 1; default 1200).
        batch_size: Sequences per step (at least 1; default 64).
        lr: AdamW's peak learning rate (positive; default 2e-3).
        weight_decay: AdamW's weight decay (default 0).
        warmup_steps: Steps of linear warm-up (default 50).
        segment_lengths: Segment lengths of the training data (default
            :data:`~interp.datasets.TRAIN_LENGTHS`).
        eval_lengths: Segment lengths of the held-out batch, none of them a training length
            (default :data:`~interp.datasets.HELD_OUT_LENGTHS`).
        max_prefix: Largest random prefix before the segment (``None``: as long as fits).
        head_l1: Strength of :func:`head_norm_penalty`, the group lasso over heads (0: off;
            default 0.06).
        head_l1_ramp: The share of ``steps`` over which that penalty ramps up from 0 (default
            0.5).
        cosine: Cosine learning-rate decay after the warm-up (default ``True``).
        eval_every: Evaluate on the held-out batch every this many steps (at least 1;
            default 100), and at the last step.
        eval_size: Sequences in the held-out batch (at least 1; default 128).
        seed: Every random draw (initial weights from ``seed``, batches from ``seed + 1``,
            the held-out batch from ``seed + 10000``); the same seed gives the same numbers.

    Raises:
        InterpError: for held-out segment lengths that overlap the training ones, a
            ``steps``, ``batch_size``, ``eval_every`` or ``eval_size`` below 1, or a
            non-positive ``lr``.
    """

    n_layers: int = 2
    n_heads: int = 2
    d_model: int = 128
    d_head: int = 32
    d_vocab: int = 64
    n_ctx: int = 48
    steps: int = 1200
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 0.0
    warmup_steps: int = 50
    segment_lengths: tuple[int, ...] = TRAIN_LENGTHS
    eval_lengths: tuple[int, ...] = HELD_OUT_LENGTHS
    max_prefix: int | None = None
    head_l1: float = 0.06
    head_l1_ramp: float = 0.5
    cosine: bool = True
    eval_every: int = 100
    eval_size: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        if set(self.segment_lengths) & set(self.eval_lengths):
            raise InterpError(
                "held-out segment lengths must differ from training ones: overlap "
                f"{sorted(set(self.segment_lengths) & set(self.eval_lengths))}"
            )
        for name in ("steps", "batch_size", "eval_every", "eval_size"):
            if getattr(self, name) < 1:
                raise InterpError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise InterpError(f"lr must be positive, got {self.lr}")

    def model_config(self) -> AttnOnlyConfig:
        """The :class:`~interp.models.attn_only.AttnOnlyConfig` of the model to train.

        Returns:
            Its sizes and seed, named ``induction-2l``.
        """
        return AttnOnlyConfig(
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_model=self.d_model,
            d_head=self.d_head,
            d_vocab=self.d_vocab,
            n_ctx=self.n_ctx,
            seed=self.seed,
            model_name="induction-2l",
        )

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict (tuples as lists), as checkpoints store them.

        Returns:
            ``{field: value}`` for every field.
        """
        d = dataclasses.asdict(self)
        d["segment_lengths"] = list(self.segment_lengths)
        d["eval_lengths"] = list(self.eval_lengths)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InductionTrainConfig:
        """The config a checkpoint's ``training`` dict (:meth:`to_dict`) describes.

        Args:
            d: ``{field: value}``; missing fields take their defaults.

        Returns:
            The :class:`InductionTrainConfig`.

        Raises:
            InterpError: as the class, for settings it refuses.
        """
        d = dict(d)
        for k in ("segment_lengths", "eval_lengths"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)


@dataclasses.dataclass
class TrainResult:
    """The trained model, its per-evaluation history and wall time.

    Made by :func:`train_induction`; :func:`save_result` writes it as a checkpoint.

    Attributes:
        model: The trained model, a hooked model: an
            :class:`~interp.models.attn_only.AttnOnlyTransformer`, in eval mode.
        config: The :class:`InductionTrainConfig` it was trained with.
        history: One dict per evaluation: ``step``, ``seconds``, ``train_loss``, then
            :func:`evaluate`'s metrics.
        seconds: Wall time of the training loop.
        interrupted: Whether Ctrl-C stopped training early.
    """

    model: AttnOnlyTransformer
    config: InductionTrainConfig
    history: list[dict[str, float]]
    seconds: float
    interrupted: bool = False


def head_norm_penalty(model: AttnOnlyTransformer) -> torch.Tensor:
    """Group-lasso penalty: the sum over heads of ``||W_O[layer, head]||_F``.

    An L1 norm over heads (an L2 norm within each) pushes the model to solve
    the task with as few heads as it needs, so that each role sits in one
    identifiable head instead of being shared out across redundant ones.

    Args:
        model: A hooked model: here one of ours, an
            :class:`~interp.models.attn_only.AttnOnlyTransformer`.

    Returns:
        A scalar tensor, differentiable in the weights.
    """
    return sum(b.attn.W_O.flatten(1).norm(dim=1).sum() for b in model.blocks)


def held_out_batch(cfg: InductionTrainConfig, n: int | None = None, seed: int | None = None):
    """The fixed evaluation batch: segment lengths never used in training.

    Args:
        cfg: The training config (its ``eval_lengths``, ``d_vocab`` and ``n_ctx``).
        n: How many sequences (``None``: ``cfg.eval_size``).
        seed: Every random draw; the same seed gives the same numbers (``None``:
            ``cfg.seed + 10000``).

    Returns:
        A :class:`~interp.datasets.RepeatedTokens` of ``n`` sequences of ``cfg.n_ctx``
        tokens.

    Raises:
        InterpError: as :func:`interp.datasets.repeated_tokens`.
    """
    return repeated_tokens(
        n or cfg.eval_size,
        d_vocab=cfg.d_vocab,
        seq_len=cfg.n_ctx,
        segment_lengths=cfg.eval_lengths,
        seed=(cfg.seed + 10_000) if seed is None else seed,
    )


def evaluate(model: AttnOnlyTransformer, data) -> dict[str, float]:
    """Held-out repeated-half loss, first-half loss and the best last-layer induction score.

    Runs in eval mode without gradients; the model's mode comes back afterwards.

    Args:
        model: A hooked model: here one of ours, an
            :class:`~interp.models.attn_only.AttnOnlyTransformer`.
        data: The batch to score, a :class:`~interp.datasets.RepeatedTokens` (e.g.
            :func:`held_out_batch`).

    Returns:
        ``repeated_loss`` (mean next-token loss where copying predicts the token),
        ``first_half_loss`` (on the first copy's tokens), ``induction`` (the best
        induction score in the last layer) and ``previous_token`` (the best
        previous-token score in layer 0), as floats.
    """
    from interp.analysis.heads.scores import head_scores

    with eval_no_grad(model):  # training mode comes back afterwards, even on an error
        nll = model(data.tokens, "loss", loss_per_token=True)  # [batch, pos - 1]
        rep = data.loss_mask[:, :-1]
        first = data.first_half_mask[:, :-1]
        scores = head_scores(
            model, data.tokens, stripes=("induction", "previous_token"), loss_mask=data.loss_mask
        )
    last = scores[scores.layer == model.cfg.n_layers - 1]
    first_layer = scores[scores.layer == 0]
    return {
        "repeated_loss": float(nll[rep].mean()),
        "first_half_loss": float(nll[first].mean()),
        "induction": float(last["induction"].max()),
        "previous_token": float(first_layer["previous_token"].max()),
    }


def train_induction(
    cfg: InductionTrainConfig | None = None,
    *,
    progress: bool = True,
    stop_when: Callable[[dict[str, float]], bool] | None = None,
) -> TrainResult:
    """Train an attention-only model on repeated sequences from scratch.

    Next-token cross-entropy on every position, plus the ramped group lasso
    (:func:`head_norm_penalty`), under :func:`deterministic_algorithms`. Ctrl-C stops
    training and returns the model so far with ``interrupted=True``.

    Args:
        cfg: Sizes and settings (``None``: the defaults, which reproduce the shipped
            checkpoint).
        progress: Show a progress bar over the steps, with the loss and the held-out
            induction score (default ``True``).
        stop_when: An optional predicate on each evaluation's metrics; training
            stops early when it returns True (used to time "time to induction").

    Returns:
        A :class:`TrainResult`.

    Example:
        >>> result = train_induction(InductionTrainConfig(steps=4, eval_every=4), progress=False)
        >>> [h["step"] for h in result.history], result.interrupted
        ([4], False)
    """
    cfg = cfg or InductionTrainConfig()
    with deterministic_algorithms():
        return _train(cfg, progress=progress, stop_when=stop_when)


@contextlib.contextmanager
def deterministic_algorithms() -> Iterator[None]:
    """Deterministic kernels on one thread, for the duration.

    Torch's deterministic kernels fix the embedding backward's summation
    order; one intra-op thread fixes how every matmul splits its sums, which
    otherwise depends on how many threads the machine (or a test worker)
    gives torch: on 2 threads the shipped run ends at induction 0.970, on 1 at
    0.949 (the shipped 0.949). A model this small trains about as fast on one
    thread as on two.

    Yields:
        Nothing; torch's previous settings come back on exit.
    """
    previous = torch.are_deterministic_algorithms_enabled()
    threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)
        torch.set_num_threads(threads)


def _train(cfg: InductionTrainConfig, *, progress: bool, stop_when) -> TrainResult:
    from tqdm.auto import tqdm

    model = AttnOnlyTransformer(cfg.model_config())
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / cfg.warmup_steps)
            * (0.5 * (1 + math.cos(math.pi * min(s, cfg.steps) / cfg.steps)) if cfg.cosine else 1.0)
        ),
    )
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    held_out = held_out_batch(cfg)
    history: list[dict[str, float]] = []
    start = time.perf_counter()
    interrupted = False
    bar = tqdm(range(cfg.steps), disable=not progress, desc="train induction", unit="step")
    try:
        for step in bar:
            batch = repeated_tokens(
                cfg.batch_size,
                d_vocab=cfg.d_vocab,
                seq_len=cfg.n_ctx,
                segment_lengths=cfg.segment_lengths,
                repeats=None,
                max_prefix=cfg.max_prefix,
                generator=gen,
            )
            loss = model(batch.tokens, "loss")
            if cfg.head_l1:
                # Ramp the penalty in: a full-strength penalty from step 0 can silence the
                # layer-0 heads before the induction circuit has formed.
                ramp = min(1.0, step / max(1, cfg.head_l1_ramp * cfg.steps))
                total = loss + cfg.head_l1 * ramp * head_norm_penalty(model)
            else:
                total = loss
            opt.zero_grad(set_to_none=True)
            total.backward()
            opt.step()
            sched.step()
            if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
                metrics = {
                    "step": step + 1,
                    "seconds": time.perf_counter() - start,
                    "train_loss": loss.item(),
                    **evaluate(model, held_out),
                }
                history.append(metrics)
                bar.set_postfix(
                    loss=f"{metrics['train_loss']:.3f}", induction=f"{metrics['induction']:.2f}"
                )
                if stop_when is not None and stop_when(metrics):
                    break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
    model.eval()
    return TrainResult(
        model=model,
        config=cfg,
        history=history,
        seconds=time.perf_counter() - start,
        interrupted=interrupted,
    )


def save_result(result: TrainResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write a training result as a checkpoint (:func:`interp.models.checkpoints.save_checkpoint`).

    The config records the training settings, the seed, the evaluation
    history and whether training was interrupted.

    Args:
        result: The :class:`TrainResult` to save.
        out_dir: The checkpoint folder, created if missing.

    Returns:
        The folder's path.

    Raises:
        InterpError: if ``out_dir`` cannot be written.
    """
    meta = {
        "training": result.config.to_dict(),
        "seed": result.config.seed,
        "history": result.history,
        "interrupted": result.interrupted,
    }
    return save_checkpoint(result.model, out_dir, meta=meta)
