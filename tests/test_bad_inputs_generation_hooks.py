"""A generation never samples from NaN (issue 43, causes 1 and 5).

A ``UserHook``'s return value is checked as the splice checks its edits: a tensor of the
activation's shape and dtype, with no NaN or infinity the model did not have. And whatever
makes the logits NaN or infinite (an edit, the model's own weights), sampling refuses them,
naming the step and the interventions in force, instead of picking token 0.
"""

import copy

import pytest
import torch

from interp.analysis.generation import Steering, UserHook, compare_generations, generate
from interp.core.errors import InterpError

ROWS = [[0, 28, 32, 10, 41, 50, 20, 8, 45, 28, 32, 10], [0, 5, 6, 7, 5, 6]]
HOOK = "blocks.1.hook_resid_pre"


def refused(model, edit, message, **options):
    with pytest.raises(InterpError, match=message) as e:
        generate(model, ROWS, max_new_tokens=3, interventions=[edit], **options)
    assert "Traceback" not in str(e.value)
    return str(e.value)


def _nan(x, hook):
    return torch.full_like(x, float("nan"))


def _in_place_nan(x, hook):
    x[..., 0] = float("nan")


def _inf(x, hook):
    return x + float("inf")


def _first_column(x, hook):
    return x[:, :1]  # broadcasts against [batch, pos, d]: silently wrong before


def _narrow(x, hook):
    return x[..., :5]


def _double(x, hook):
    return x.double()


def _not_a_tensor(x, hook):
    return x.tolist()


@pytest.mark.parametrize("positions", ["all", "new", [1, 2]])
@pytest.mark.parametrize(
    "fn, message",
    [
        (_first_column, r"returned shape \(3, 1, 128\)|returned shape \(2, 1, 128\)"),
        (_narrow, "returned shape"),
        (_double, "returned dtype torch.float64"),
        (_not_a_tensor, "returned list"),
        (_nan, "NaN"),
        (_in_place_nan, "NaN"),
        (_inf, "infinit"),
    ],
    ids=["broadcast", "narrow", "float64", "list", "nan", "nan in place", "inf"],
)
def test_a_user_hook_return_is_checked(induction_model, fn, message, positions):
    # "new" edits only cached one-column passes, where x[:, :1] is x: whole passes instead
    options = {"kv_cache": False} if positions == "new" else {}
    err = refused(induction_model, UserHook(HOOK, fn, positions=positions), message, **options)
    assert fn.__name__ in err and HOOK in err, err


def test_a_user_hook_may_mask_scores_with_minus_infinity(induction_model):
    """-inf in attention scores is a mask (probability 0), not an overflow: allowed."""

    def block_bos(x, hook):
        x[..., 0] = float("-inf")

    gen = generate(
        induction_model, ROWS, max_new_tokens=2,
        interventions=[UserHook("blocks.1.attn.hook_attn_scores", block_bos)],
    )  # fmt: skip
    assert torch.isfinite(gen.logprobs[~gen.logprobs.isnan()]).all()


def test_good_user_hooks_still_run(induction_model):
    def halve(x, hook):
        return x * 0.5

    def in_place(x, hook):
        x.mul_(0.5)

    a = generate(induction_model, ROWS, max_new_tokens=3, interventions=[UserHook(HOOK, halve)])
    b = generate(induction_model, ROWS, max_new_tokens=3, interventions=[UserHook(HOOK, in_place)])
    assert torch.equal(a.tokens, b.tokens)


def test_non_finite_logits_name_the_step_and_the_edit(induction_model):
    """A steering of 1e38 overflows the residual stream: the logits are not finite."""
    v = torch.ones(induction_model.cfg.d_model)
    edit = Steering(HOOK, v, scale=3e38, positions="new")
    err = refused(induction_model, edit, "not finite")
    assert "new token 1" in err and "add 3e+38 x a vector" in err, err
    with pytest.raises(InterpError, match="new token 1"):
        compare_generations(induction_model, ROWS, interventions=[edit], max_new_tokens=3)


def test_non_finite_logits_of_the_model_itself_are_named(induction_model):
    broken = copy.deepcopy(induction_model)
    with torch.no_grad():
        broken.unembed.W_U[:, 7] = float("nan")
    with pytest.raises(InterpError, match="new token 0") as e:
        generate(broken, ROWS, max_new_tokens=2)
    assert "no intervention" in str(e.value) and "weight" in str(e.value)
