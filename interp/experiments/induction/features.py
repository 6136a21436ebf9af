"""Why the induction head attends, in features: its score split over a layer-0 dictionary.

The component split (:mod:`.why_attend`) says the induction head's score on its target is
carried by (the query token's embedding) x (the previous-token head's output at the key).
Here the previous-token layer's output is itself split into the features of a sparse
dictionary, so the question becomes *which* features: a TopK dictionary (Gao et al. 2024,
:func:`interp.dictionaries.train_dictionary`) is trained on that layer's attention output
(``blocks.0.hook_attn_out``) over the model's own training distribution (repeated random
segments), and :func:`interp.analysis.qk_attribution` with the dictionary as a *writer*
splits the residual stream at each side into the token embedding (one piece per token,
``embed:A``), the positional embedding, the dictionary's active features, its error and
decoder bias (rows sum to the model's score).

Each feature's meaning is read from its own activations, never assumed: over the
dictionary's training tokens, the share of its activation that falls on positions whose
previous token is each token; its ``previous_token`` is the largest. The lab then counts the
held-out prompts whose top (query, key) pair is (the query token ``A``'s embedding) x (a
feature whose own top previous token is ``A``), and removes that key feature from the
head's key input alone (:func:`interp.analysis.qk_interventions`, norms recomputed) to see
whether the score moves by what the attribution says.

Example:
    >>> from interp.models import load_model
    >>> m = load_model("induction-2l")
    >>> D, training, tokens = lab_dictionary(m, "induction-2l", 0)
    >>> D.hook_name, D.d_sae, training["report"]["l0"]
    ('blocks.0.hook_attn_out', 128, 4.0)
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import torch

from interp.analysis.heads.qk.attribution import qk_attribution
from interp.analysis.heads.qk.interventions import qk_interventions
from interp.analysis.heads.qk.pairs import feature_of
from interp.core.paths import INDUCTION_CHECKPOINT, data_dir
from interp.core.protocol import HookedModel
from interp.datasets import RepeatedTokens, training_sequences
from interp.dictionaries import Dictionary, load_dictionary, train_dictionary
from interp.dictionaries.activations import hook_activations
from interp.dictionaries.logit_effects import token_strings
from interp.dictionaries.splice import check_dictionary
from interp.experiments.induction.why_attend import induction_targets

FEATURES, K, SEQUENCES, EPOCHS = 128, 4, 1024, 8  # the dictionary of the lab
SHIPPED = "induction-2l-attn0"  # the shipped model's, in data/ (the sae-lens layout)
#: the command that wrote it (``interp train dictionary``; its metadata records it too)
RECIPE = (
    f"interp train dictionary --model induction-2l --hook blocks.0.hook_attn_out --features "
    f"{FEATURES} --k {K} --corpus repeated --sequences {SEQUENCES} --epochs {EPOCHS} --seed 0"
)
CHECKS = 32  # prompts whose top key feature is removed, one intervention each
TENTH = 0.1  # a removal agrees when it moves the score within this share of the attribution


@dataclasses.dataclass(frozen=True)
class WhyInFeatures:
    """The induction head's score on its targets, over the previous-token layer's features."""

    dictionary: Dictionary
    training: dict  # the dictionary's figures: variance explained, L0, dead share, losses
    meanings: pd.DataFrame  # one row per feature: previous_token, purity, active
    per_prompt: pd.DataFrame  # one row per prompt: token A, score, top pair, hit
    removals: pd.DataFrame  # the top key feature removed, beside its attribution

    @property
    def share(self) -> float:
        """Prompts whose top pair is (embed:A) x (a feature whose top previous token is A)."""
        return float(self.per_prompt["hit"].mean())

    @property
    def agreeing(self) -> float:
        """Removals whose measured change is within a tenth of the attribution."""
        return float(self.removals["within_a_tenth"].mean())


def lab_dictionary(
    model: HookedModel, name: str, layer: int, *, seed: int = 0
) -> tuple[Dictionary, dict, torch.Tensor]:
    """The lab's dictionary on ``layer``'s attention output, its figures and its training
    tokens: the shipped one (:data:`SHIPPED`) for the shipped model's layer 0, else one
    trained now by the same recipe (:func:`layer_dictionary`).

    Args:
        model: The hooked model.
        name: Its name (``induction-2l``: the shipped model).
        layer: The previous-token head's layer.
        seed: The recipe's seed (a dictionary trained now).

    Returns:
        ``(dictionary, training, tokens)``: ``training`` holds the training record and its
        ``report`` (variance explained, L0, dead share, losses on held-out tokens).

    Raises:
        InterpError: for a shipped dictionary that does not fit the model.
    """
    if name == INDUCTION_CHECKPOINT and layer == 0:
        D = load_dictionary(data_dir() / SHIPPED)
        check_dictionary(model, D)
        corpus = D.metadata["corpus"]
        n_ctx = int(model.cfg.n_ctx)
        tokens = _draw(model, int(corpus["n_tokens"]) // n_ctx, int(corpus["seeds"][0]))
        training = {**D.metadata["training"], "report": D.metadata["report"]}
        return D, training, tokens
    return layer_dictionary(model, layer, seed=seed)


def _draw(model: HookedModel, n: int, seed: int) -> torch.Tensor:
    """``interp train dictionary --corpus repeated``'s sequences: the training distribution."""
    return training_sequences(n, d_vocab=int(model.cfg.d_vocab), seq_len=int(model.cfg.n_ctx),
                              seed=seed)  # fmt: skip


def layer_dictionary(
    model: HookedModel, layer: int, *, seed: int = 0, sequences: int = SEQUENCES,
    epochs: int = EPOCHS,
) -> tuple[Dictionary, dict, torch.Tensor]:  # fmt: skip
    """A TopK dictionary (:data:`FEATURES` features, ``k`` :data:`K`) on ``layer``'s
    attention output, trained as :data:`RECIPE` trains the shipped one (training tokens from
    ``seed + 1``, held-out tokens for its report from ``seed + 2``).

    Args:
        model: The hooked model (a fixed context: ``cfg.n_ctx``).
        layer: The layer whose ``hook_attn_out`` the dictionary reads.
        seed: Its tokens' and its training's seed.
        sequences: Training sequences.
        epochs: Passes over them.

    Returns:
        ``(dictionary, training, tokens)`` as :func:`lab_dictionary`.
    """
    tokens, held_out = _draw(model, sequences, seed + 1), _draw(model, 128, seed + 2)
    fit = train_dictionary(
        model, tokens, hook=f"blocks.{layer}.hook_attn_out", n_features=FEATURES, k=K,
        epochs=epochs, seed=seed, eval_tokens=held_out,
    )  # fmt: skip
    return fit.dictionary, {**fit.training, "report": dataclasses.asdict(fit.report)}, tokens


def feature_meanings(model: HookedModel, D: Dictionary, tokens: torch.Tensor) -> pd.DataFrame:
    """What each feature reads, from its own activations on ``tokens``: the previous token
    that takes the largest share of its activation (``previous_token``), that share
    (``purity``) and how many positions it is active on (``active``).

    Args:
        model: The hooked model.
        D: A dictionary at one of its hooks.
        tokens: ``[batch, pos]`` ids.

    Returns:
        One row per feature: ``feature, previous_token, purity, active``.
    """
    with torch.no_grad():
        acts = D.encode(hook_activations(model, tokens, D.hook_name).to(D.device)).float().cpu()
    a = acts[:, 1:].reshape(-1, D.d_sae)  # positions with a previous token
    prev = tokens[:, :-1].reshape(-1).cpu()
    mass = torch.zeros(int(model.cfg.d_vocab), D.d_sae).index_add_(0, prev, a.clamp_min(0))
    total = mass.sum(0)
    best = mass.max(0)
    return pd.DataFrame({
        "feature": range(D.d_sae),
        "previous_token": best.indices.tolist(),
        "purity": (best.values / total.clamp_min(1e-30)).where(total > 0, 0.0).tolist(),
        "active": (a > 0).sum(0).tolist(),
    })  # fmt: skip


def why_in_features(
    model: HookedModel, data: RepeatedTokens, head: tuple[int, int],
    dictionary: tuple[Dictionary, dict, torch.Tensor], *, checks: int = CHECKS,
) -> WhyInFeatures:  # fmt: skip
    """Read the dictionary's features' meanings, split ``head``'s score on each prompt's
    induction target over them and remove the top key feature of ``checks`` prompts
    (module docstring).

    Args:
        model: The hooked model.
        data: The held-out repeated sequences.
        head: ``(layer, head)`` of the induction head.
        dictionary: ``(dictionary, training, tokens)`` from :func:`lab_dictionary`.
        checks: Prompts whose top key feature is removed (the first ``checks``).

    Returns:
        A :class:`WhyInFeatures`.
    """
    D, training, train_tokens = dictionary
    meanings = feature_meanings(model, D, train_tokens)
    q, k = induction_targets(data)
    L, h = head
    df = qk_attribution(model, data.tokens, layer=L, head=h, query_positions=q,
                        key_positions=k, dictionary=[D])  # fmt: skip
    cell = ["sequence", "query_position", "key_position"]
    score = df.groupby(cell)["value"].sum().rename("score")
    best = df.loc[df.groupby(cell)["value"].idxmax()].set_index(cell)
    per = pd.concat([score, best[["query_piece", "key_piece", "value"]]], axis=1).reset_index()
    per = per.rename(columns={"query_piece": "top_query_piece", "key_piece": "top_key_piece",
                              "value": "top_value"})  # fmt: skip
    a = [int(data.tokens[s, p]) for s, p in zip(per["sequence"], per["query_position"])]
    per.insert(1, "token", a)
    meaning = dict(zip(meanings["feature"], meanings["previous_token"]))
    read = [meaning.get(feature_of(p)) for p in per["top_key_piece"]]
    per["key_feature_reads"] = [float("nan") if r is None else r for r in read]
    embed = [f"embed:{s}" for s in token_strings(model, a)]
    per["hit"] = [
        e == qp and r == t
        for e, qp, r, t in zip(embed, per["top_query_piece"], read, a, strict=True)
    ]
    per.attrs.update(df.attrs)
    removals = _removals(model, data, head, D, per, q, k, checks)
    return WhyInFeatures(D, training, meanings, per, removals)


def _removals(
    model: HookedModel, data: RepeatedTokens, head: tuple[int, int], D: Dictionary,
    per: pd.DataFrame, q: list, k: list, checks: int,
) -> pd.DataFrame:  # fmt: skip
    """Each of the first ``checks`` prompts whose top key piece is a feature: that feature
    removed from the head's key input alone (norms recomputed), the measured change beside
    the attribution (minus the feature's key-side share), and whether they agree within a
    tenth. A feature outside the key side's three largest pieces is not removed."""
    rows = []
    for i in per.index[per["top_key_piece"].map(feature_of).notna()][:checks]:
        s = int(per.at[i, "sequence"])
        feature = per.at[i, "top_key_piece"]
        out = qk_interventions(
            model, data.tokens[s : s + 1], layer=head[0], head=head[1], query_positions=[q[s]],
            key_positions=[k[s]], dictionary=[D], top=3,
        )  # fmt: skip
        key = out[(out["side"] == "key") & (out["component"] == feature)]
        if key.empty:  # not among the key side's three largest pieces
            continue
        a, m = float(key["attribution"].iloc[0]), float(key["measured"].iloc[0])
        rows.append({
            "sequence": s, "feature": feature, "attribution": a, "measured": m,
            "within_a_tenth": abs(m - a) <= TENTH * abs(a),
        })  # fmt: skip
    return pd.DataFrame(rows)


def feature_sentence(w: WhyInFeatures, induction: str, prev: str) -> str:
    """The lab's answer in features, in one sentence with its numbers."""
    rep = w.training["report"]
    pure = int((w.meanings["purity"] >= 0.8).sum())
    return (
        f"In features: with a {w.dictionary.d_sae}-feature TopK dictionary (k "
        f"{w.dictionary.k}) on "
        f"{w.dictionary.hook_name} (variance explained {rep['fraction_variance_explained']:.3f}, "
        f"{pure} features at least 80% one previous token, read from their own activations), "
        f"{induction}'s top (query, key) pair is (the token A) x (a feature whose own top "
        f"previous token is A: what {prev} wrote) in {w.share:.1%} of "
        f"{len(w.per_prompt)} held-out prompts; removing that feature from {induction}'s key "
        f"input alone moves the score within a tenth of its attribution in "
        f"{w.agreeing:.0%} of {len(w.removals)} prompts."
    )


def feature_summary_rows(w: WhyInFeatures, induction: str, prev: str) -> list[tuple]:
    """The lab summary's rows for the feature split (quantity, value, reference)."""
    rep = w.training["report"]
    return [
        (f"{w.dictionary.hook_name} dictionary: variance explained",
         float(rep["fraction_variance_explained"]), "held-out positions"),
        (f"{induction}'s top pair is (embed:A) x (a feature reading previous token A)",
         w.share, ">= 0.9 of prompts"),
        ("its key feature removed from the key input: within a tenth of its attribution",
         w.agreeing, "share of checked prompts"),
    ]  # fmt: skip
