"""The labs: each computes frozen findings, turns them into tables, figures and a report.

Every lab is a package, ``interp/experiments/<lab>/``: ``analysis.py`` computes (``analyse``, the
findings dataclass, ``tables``) and ``report.py`` lays out (``figures``, ``report``,
``summary``; it imports the analysis, never the reverse). The package re-exports both, so
every lab has the same shape:

* ``analyse(...) -> Findings``: all computation, into a frozen dataclass that
  holds everything the report shows (attention patterns included); labs on
  models take the model(s) first (aliases, folders or loaded models), every
  lab takes ``seed`` and ``progress``;
* ``tables(findings)``, ``figures(findings)``, ``report(findings)``,
  ``summary(findings)``: pure functions of the findings, no model calls.

:func:`run_lab` checks every option before any work, runs ``analyse`` and
writes the output with :func:`interp.experiments.writer.write_lab`.

Example:
    >>> check_options("induction", seed=3)
    {'seed': 3, 'model': 'induction-2l'}
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from interp.core.checks import check_seed
from interp.core.errors import InterpError
from interp.core.protocol import ModelSource
from interp.experiments.writer import check_format, write_lab
from interp.outputs.files import check_output_dir, check_replaceable

# name -> (package, which models it takes: "none" | "one" | "many", default models).
# Kept here, not read from the modules, so options are checked without importing torch.
LABS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "induction": ("interp.experiments.induction", "one", ("induction-2l",)),
    "bank-sense": ("interp.experiments.bank_sense", "none", ()),
    "feature-recovery": ("interp.experiments.feature_recovery", "none", ()),
    "pretrained": ("interp.experiments.pretrained_heads", "many", ("smollm2-135m", "minilm-l6")),
    "name-movers": ("interp.experiments.name_movers", "one", ("smollm2-135m",)),
    "circuits": ("interp.experiments.circuits", "one", ("induction-2l",)),
}


def lab_module(name: str) -> Any:
    """The module of the lab called ``name``.

    Raises:
        InterpError: for an unknown lab.
    """
    if name not in LABS:
        raise InterpError(f"unknown lab {name!r}; choose one of {', '.join(LABS)}")
    return importlib.import_module(LABS[name][0])


def reports_dir() -> Path:
    """Where labs write by default, the same wherever a notebook or the CLI runs from.

    ``$INTERP_REPORTS`` if set; else ``reports/`` in the interp project folder
    that holds the current directory (the nearest ancestor with ``labs/`` and
    ``pyproject.toml``: a notebook opened in ``labs/`` writes where ``make run``
    writes); else ``reports/`` in the current directory.
    """
    env = os.environ.get("INTERP_REPORTS")
    if env:
        return Path(env).expanduser()
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / "labs").is_dir() and (folder / "pyproject.toml").is_file():
            return folder / "reports"
    return here / "reports"


def default_out(name: str) -> Path:
    """``<reports_dir()>/<name>``."""
    return reports_dir() / name


def check_options(
    name: str,
    *,
    models: ModelSource | Sequence[ModelSource] | None = None,
    seed: Any = 0,
    fmt: str = "csv",
) -> dict:
    """Check a lab's options (nothing loaded or computed) and return its ``analyse`` arguments.

    Raises:
        InterpError: for an unknown lab or format, a bad seed, models given to a
            lab that has none, several models for a one-model lab, or a model
            name that cannot be loaded.
    """
    if name not in LABS:
        raise InterpError(f"unknown lab {name!r}; choose one of {', '.join(LABS)}")
    _, kind, defaults = LABS[name]
    check_format(fmt)
    kwargs: dict[str, Any] = {"seed": check_seed(seed)}
    if models is None:
        given: list[Any] = []
    elif isinstance(models, (str, os.PathLike)):
        given = [models]
    else:
        given = list(models)
    if kind == "none":
        if given:
            raise InterpError(f"the {name} lab builds its own models; drop --model")
        return kwargs
    if kind == "one" and len(given) > 1:
        raise InterpError(f"the {name} lab analyses one model; pass --model once")
    from interp.models.loader import check_model_name

    for m in given:
        if isinstance(m, (str, os.PathLike)):
            check_model_name(m)
    if kind == "one":
        kwargs["model"] = given[0] if given else defaults[0]
    else:
        kwargs["models"] = tuple(given) if given else defaults
    return kwargs


def run_lab(
    name: str,
    *,
    out: str | os.PathLike[str] | None = None,
    fmt: str = "csv",
    models: ModelSource | Sequence[ModelSource] | None = None,
    seed: int = 0,
    progress: bool = True,
    device: Any = None,
    dtype: Any = None,
) -> Any:
    """Run a lab and write its report, tables and figures (to ``reports/<name>`` by default).

    Every option, and the output folder, is checked before any work.
    ``device`` and ``dtype`` load the lab's models as :func:`interp.models.load_model` does.

    Raises:
        InterpError: as :func:`check_options`, for an output folder that cannot
            be written or holds files that are not an earlier lab output, or
            ``device``/``dtype`` for a lab that builds its own models (or a
            device this machine lacks).
    """
    kwargs = check_options(name, models=models, seed=seed, fmt=fmt)
    target = Path(out) if out is not None else default_out(name)
    check_replaceable(check_output_dir(target))
    placed = device is not None or dtype is not None
    if placed:
        from interp.models.loader import check_dtype, load_model
        from interp.models.placement import check_device

        if LABS[name][1] == "none":
            raise InterpError(f"the {name} lab builds its own small models; drop --device/--dtype")
        check_device(device)
        check_dtype(dtype)
    meta: dict[str, Any] = {}  # seed and model names come from the findings (writer)
    if "model" in kwargs or "models" in kwargs:
        if placed:
            meta.update(device=str(device or "cpu"), dtype=str(dtype or "float32"))

            def place(m: Any) -> Any:
                if isinstance(m, (str, os.PathLike)):
                    return load_model(m, device=device, dtype=dtype)
                return m

            if "models" in kwargs:
                kwargs["models"] = tuple(place(m) for m in kwargs["models"])
            else:
                kwargs["model"] = place(kwargs["model"])
    lab = lab_module(name)
    findings = lab.analyse(**kwargs, progress=progress)
    return write_lab(lab, findings, target, fmt=fmt, meta=meta)
