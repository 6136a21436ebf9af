"""Every public analysis function has the documented shape (interp.analysis docstring).

* no ``*args`` / ``**kwargs`` hiding options from ``help()``;
* every parameter and the return annotated, and a docstring with ``Raises:``;
* functions of a model take ``model`` first, then at most their data (``tokens``,
  ``items`` or ``text``) positionally, every option keyword-only;
* every function that runs the model takes ``cache=``; the ones that do not
  are checked by running them on a model whose forward passes fail;
* every ``model`` parameter of the package, public or not, is a
  :class:`~interp.core.protocol.HookedModel` (or a concrete model class), never ``Any``.
"""

import functools
import inspect
import typing

import pytest
import torch

import interp.analysis as A
from interp.core.glossary import GLOSSARY, RETIRED, words


def _is_function(f):
    return inspect.isfunction(f) or isinstance(f, functools.partial)


FUNCTIONS = {name: getattr(A, name) for name in A.__all__ if _is_function(getattr(A, name))}
DATA = {"tokens", "items", "text", "prompt"}
# Functions of data, not of a model: their positional parameters.
DATA_POSITIONALS = {
    "subspaces": ["W"],
    "null_space_dimension": ["W"],
    "factored_subspaces": ["A", "B"],
    "diagonal_fraction": ["fm"],
    "previous_position_attention": ["fm"],
    "sense_similarity": ["states"],
    "nearest_neighbour_probe": ["states"],
    "stripe_mask": ["tokens", "stripe"],
    "pattern_scores": ["patterns", "tokens"],
    "load_circuit": ["path", "model"],
    "loss_metric": ["loss_mask"],
    "logit_diff_metric": ["answer", "wrong"],
    "estimate_agreement": ["exact", "estimated"],
    "edge_agreement": ["exact", "estimated"],
}
WEIGHT_ONLY = {
    "qk_circuit",
    "positional_kernel",
    "ov_circuit",
    "k_composition_circuit",
    "effective_embedding",
    "copying_scores",
    "composition_scores",
    "head_subspaces",
    "probe_tokens",
    "zero_head_hooks",
    "ordinary_word_ids",
    "encode_word",
    "build_graph",
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_signature_shape(name):
    fn = FUNCTIONS[name]
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    kinds = {p.kind for p in params}
    assert inspect.Parameter.VAR_POSITIONAL not in kinds, f"{name} takes *args"
    assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{name} takes **kwargs"
    missing = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    assert not missing, f"{name}: unannotated {missing}"
    assert sig.return_annotation is not inspect.Signature.empty, f"{name}: no return annotation"
    doc = inspect.getdoc(fn) or ""
    assert doc.splitlines() and doc.splitlines()[0].strip(), f"{name} has no docstring"
    positional = [p.name for p in params if p.kind != inspect.Parameter.KEYWORD_ONLY]
    if positional and positional[0] == "model":
        assert len(positional) <= 2, f"{name}: options must be keyword-only, got {positional}"
        if len(positional) == 2:
            assert positional[1] in DATA, f"{name}: second positional {positional[1]!r}"
        if name not in WEIGHT_ONLY:
            assert "cache" in sig.parameters, f"{name} runs the model but takes no cache="
            assert "Raises:" in doc, f"{name}: docstring has no Raises section"
    else:
        assert positional == DATA_POSITIONALS[name], f"{name}: positionals {positional}"


class _NoForward(torch.nn.Module):
    """The shipped model's weights and config, but every forward pass raises."""

    def __init__(self, model):
        super().__init__()
        self.inner = model
        self.cfg = model.cfg
        self.tokenizer = None
        self.blocks = model.blocks
        self.ln_final = model.ln_final

    def __getattr__(self, name):
        if name.startswith("W_") or name.startswith("b_") or name in ("QK", "OV"):
            return getattr(self.inner, name)
        return super().__getattr__(name)

    def forward(self, *a, **k):
        raise AssertionError("a weight-only function ran the model")

    def run_with_cache(self, *a, **k):
        raise AssertionError("a weight-only function ran the model")

    def run_with_hooks(self, *a, **k):
        raise AssertionError("a weight-only function ran the model")


def test_weight_only_functions_do_not_run_the_model(induction_model):
    spy = _NoForward(induction_model)
    A.qk_circuit(spy, layer=1, head=1)
    A.positional_kernel(spy, layer=0, head=1)
    A.ov_circuit(spy, layer=1, head=1)
    A.k_composition_circuit(spy, prev="L0H1", induction="L1H1")
    A.effective_embedding(spy, layer=0)
    A.copying_scores(spy, heads=["L1H1"])
    A.composition_scores(spy, component="K")
    A.head_subspaces(spy, layer=0, head=1, component="V")
    A.probe_tokens(spy, n=2)
    A.zero_head_hooks(spy, heads=["L0H0"])
    A.build_graph(spy)
    covered = {
        "build_graph",
        "qk_circuit",
        "positional_kernel",
        "ov_circuit",
        "k_composition_circuit",
        "effective_embedding",
        "copying_scores",
        "composition_scores",
        "head_subspaces",
        "probe_tokens",
        "zero_head_hooks",
    }
    # the two word functions need a tokenizer, checked in test_pretrained_lab
    assert WEIGHT_ONLY - covered == {"ordinary_word_ids", "encode_word"}


def test_no_submodule_shadows_an_export():
    """``from interp.analysis import f`` must give the function even after ``f``'s module loads."""
    from pathlib import Path

    pkg = Path(A.__file__).parent
    clashes = [n for n in A.__all__ if (pkg / f"{n}.py").exists()]
    assert clashes == []


def test_the_lab_table_matches_each_labs_analyse():
    """``interp.experiments.LABS`` (options checked without importing torch) agrees with
    ``analyse``."""
    from interp.experiments import LABS, lab_module

    for name, (_, kind, defaults) in LABS.items():
        lab = lab_module(name)
        assert lab.NAME == name
        params = inspect.signature(lab.analyse).parameters
        if kind == "none":
            assert "model" not in params and "models" not in params, name
        elif kind == "one":
            assert (params["model"].default,) == defaults, name
        else:
            assert tuple(params["models"].default) == defaults, name


# ------------------------------------------------------------------ one word, one meaning
# The values each enumerated word takes, in every function that has a parameter of that name.
VALUES = {
    "ablation": {"zero", "mean", "resample", "patch"},
    "method": {"exact", "eap", "eap-ig", "attribution"},
    "direction": {"noising", "denoising"},
    "by": {"layer", "layer_position", "head", "head_position", "component"},
}
# The functions whose `positions` says where they *edit* (an intervention). A function that
# reads logits at some positions takes `at`; a new function taking `positions` belongs here.
EDITS = {
    "ablate_heads",
    "ablate_head_groups",
    "ablate_mlps",
    "ablate_layers",
    "patch_heads",
    "patch_components",
    "attribute_heads",
    "path_patch",
    "attribute_edges",
    "evaluate_circuit",
    "null_space_probe",
}
PATCHES = {"patch_heads", "patch_components", "path_patch", "attribute_edges", "attribute_heads"}


def _hints(fn):
    base = fn.func if isinstance(fn, functools.partial) else fn
    return typing.get_type_hints(base)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_one_word_one_meaning(name):
    """A parameter named after a glossary word takes that word's values; retired words are
    never parameters; `positions` is where an edit applies; every patching function takes
    the same `direction`; `model` is a HookedModel."""
    fn = FUNCTIONS[name]
    params = inspect.signature(fn).parameters
    hints = _hints(fn)
    retired = sorted(set(params) & set(RETIRED))
    assert not retired, (
        f"{name} takes {retired}; the vocabulary says {[RETIRED[r] for r in retired]}"
    )
    for word, allowed in VALUES.items():
        if word in params:
            values = set(typing.get_args(hints[word]))
            assert values and values <= allowed, f"{name}.{word} takes {values}, not {allowed}"
    if "positions" in params:
        assert name in EDITS, f"{name} takes positions but edits nothing: read positions are `at`"
    if name in PATCHES:
        assert set(typing.get_args(hints["direction"])) == VALUES["direction"], name
        assert params["direction"].default == "noising", name
    if "model" in params:
        assert hints["model"].__name__ == "HookedModel", f"{name}: model is {hints['model']}"


def test_the_glossary_names_the_shared_words():
    for word in ("ablation", "method", "direction", "positions", "at", "answer", "wrong", "by"):
        assert word in words()
    used = {p for fn in FUNCTIONS.values() for p in inspect.signature(fn).parameters}
    assert set(VALUES) <= used and set(RETIRED).isdisjoint(used)
    assert "noising" in GLOSSARY["direction"] and "default" in GLOSSARY["direction"]


# Every analysis that runs the model over a batch of prompts splits them into chunks under a
# memory budget and can state its cost first (interp.engine.chunks); a new one belongs here.
CHUNKED = {
    "ablate_heads",
    "ablate_head_groups",
    "ablate_mlps",
    "ablate_layers",
    "patch_heads",
    "patch_components",
    "attribute_heads",
    "path_patch",
    "attribute_edges",
    "evaluate_circuit",
    "circuit_curve",
    "find_circuit",
    "direct_logit_attribution",
    "logit_lens",
    "head_scores",
    "head_atlas",
    "qk_attribution",
    "induction_scores",
    "previous_token_scores",
    "duplicate_token_scores",
    "generate",
    "compare_generations",
}


@pytest.mark.parametrize("name", sorted(CHUNKED))
def test_analyses_that_run_the_model_take_a_budget_and_state_their_cost(name):
    params = inspect.signature(FUNCTIONS[name]).parameters
    for option in ("memory_budget", "estimate", "progress"):
        assert option in params, f"{name} takes no {option}="
        assert params[option].kind == inspect.Parameter.KEYWORD_ONLY, f"{name}.{option}"
    assert params["estimate"].default is False and params["memory_budget"].default is None
    assert "Estimate" in str(inspect.signature(FUNCTIONS[name]).return_annotation), name


# ------------------------------------------------------------------ a model is a HookedModel
# The names a ``model`` parameter may be annotated with (interp.core.protocol): the protocol,
# the protocol or sizes alone (the head checks), or a model, an alias or a folder (the labs).
MODEL_TYPES = {"HookedModel", "SizedModel", "ModelSource"}
# Validators take anything and refuse what is not a model, so their parameter is ``object``.
VALIDATORS = {
    "interp.core.protocol.model_cfg",
    "interp.core.protocol.check_model",
    "interp.core.protocol.model_name",
}


def _public_callables():
    """Every public function, class and public method defined in a module of ``interp``
    (each where it is defined, so a re-export is checked once), partials included."""
    import importlib
    import pkgutil

    import interp

    out = {}
    for info in pkgutil.walk_packages(interp.__path__, "interp."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if name.startswith("_"):
                continue
            if isinstance(obj, functools.partial) and name in getattr(mod, "__all__", [name]):
                out[f"{info.name}.{name}"] = obj
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if getattr(obj, "__module__", None) != info.name:
                continue
            out[f"{info.name}.{name}"] = obj
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    if isinstance(value, (staticmethod, classmethod)):
                        value = value.__func__
                    if inspect.isfunction(value) and (attr == "__init__" or attr[0] != "_"):
                        out[f"{info.name}.{name}.{attr}"] = value
    return out


def _annotation_names(annotation) -> set[str]:
    """The names an annotation is made of: ``'HookedModel | None'`` -> {HookedModel, None}."""
    import re

    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return set(re.findall(r"[A-Za-z_][\w.]*", text.replace("typing.", "")))


def _concrete_model(fn, param: str) -> bool:
    """Whether ``fn``'s ``param`` is annotated with one concrete model class (a lab's own
    ``FeatureHead``, ``AttnOnlyTransformer``): more precise than the protocol."""
    try:
        hint = typing.get_type_hints(fn).get(param)
    except (NameError, TypeError):
        return False
    return inspect.isclass(hint) and issubclass(hint, torch.nn.Module)


def test_every_model_parameter_is_a_hooked_model():
    """No public callable of any ``interp`` module (the analyses' exports among them) takes
    ``model`` (or ``models``) unannotated or as ``Any``: it is a :class:`HookedModel`."""
    callables = _public_callables()
    assert "interp.analysis.components.ablation.ablate_heads" in callables  # it sees them
    assert {"interp.engine.edges.graph.build_graph", "interp.core.protocol.check_model"} <= set(
        callables
    )
    problems = []
    for name, obj in sorted(callables.items()):
        base = obj.func if isinstance(obj, functools.partial) else obj
        try:
            params = inspect.signature(base).parameters
        except (TypeError, ValueError):  # a builtin's signature: no parameters of ours
            continue
        # ``models`` of a result class is its findings per model, not a model
        result = inspect.isclass(obj) or name.endswith(".__init__")
        for param in ("model",) if result else ("model", "models"):
            if param not in params:
                continue
            annotation = params[param].annotation
            if annotation is inspect.Parameter.empty:
                problems.append(f"{name}({param}): unannotated")
                continue
            used = _annotation_names(annotation)
            if "Any" in used:
                problems.append(f"{name}({param}: {annotation}): Any")
            elif name in VALIDATORS:
                if used != {"object"}:
                    problems.append(f"{name}({param}: {annotation}): a validator takes object")
            elif not used & MODEL_TYPES and not _concrete_model(base, param):
                problems.append(f"{name}({param}: {annotation}): not a HookedModel")
    assert not problems, "\n".join(problems)


def test_the_model_types_are_the_protocols():
    from interp.core import protocol

    for alias in MODEL_TYPES - {"HookedModel"}:
        assert protocol.HookedModel in typing.get_args(getattr(protocol, alias)), alias


def test_no_function_of_the_package_takes_model_as_any():
    """The same, read from the source: private helpers and nested functions too."""
    import ast
    from pathlib import Path

    problems = []
    for path in sorted((Path(__file__).resolve().parents[1] / "interp").rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = fn.args
            for arg in args.posonlyargs + args.args + args.kwonlyargs:
                if arg.arg != "model":
                    continue
                text = ast.unparse(arg.annotation) if arg.annotation else None
                if text is None or "Any" in text.replace("|", " ").split():
                    problems.append(f"{path.name}:{fn.lineno} {fn.name}(model: {text})")
    assert not problems, "\n".join(problems)
