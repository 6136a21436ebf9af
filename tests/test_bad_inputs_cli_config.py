"""What a model's config alone can refuse is refused before its weights load (issue 43, cause 3).

Each case runs the real command on a model folder whose weights are truncated: had the
command loaded them first, it would fail with "damaged or incomplete" instead of the
option's own message. One line on stderr, exit 2, nothing written.
"""

import json
import shutil

import pytest
import torch
from test_bad_inputs_cli import gpt2_dir, listing, one_line

from interp.cli.model_checks import model_spec_of, per_position_shape
from interp.core.errors import InterpError
from interp.core.paths import INDUCTION_CHECKPOINT, data_dir
from interp.dictionaries import Dictionary
from interp.models.spec import model_spec


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A GPT-2 folder (d_model 32, 2 layers x 4 heads, context 64) and a BERT encoder folder,
    both with a tokenizer and truncated weights, a damaged copy of our checkpoint, steering
    vectors and a dictionary 64 wide."""
    from transformers import BertConfig, BertModel

    from interp.models.hf_tokenizers import word_tokenizer

    d = tmp_path_factory.mktemp("config_only")
    g = gpt2_dir(d / "g", damaged=True)
    bert = d / "bert"
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=30, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    BertModel(cfg).save_pretrained(bert)
    word_tokenizer(30).save_pretrained(bert)
    w = bert / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    ckpt = d / "ckpt"
    shutil.copytree(data_dir() / INDUCTION_CHECKPOINT, ckpt)
    w = ckpt / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    torch.save(torch.ones(7), d / "v7.pt")
    torch.save(torch.ones(32), d / "v32.pt")
    D = Dictionary.random(d_in=64, d_sae=16, hook_name="blocks.1.hook_resid_pre", seed=0)
    D.save(d / "dict64")
    D = Dictionary.random(d_in=128, d_sae=16, hook_name="blocks.1.hook_resid_pre", seed=0)
    D.save(d / "dict128")
    return {"g": g, "bert": bert, "ckpt": ckpt, "d": d}


CASES = [
    (["generate", "--model", "{g}", "--prompt", "t2 t3", "--ablate", "L99H0"],
     "--ablate: layer 99 out of range"),
    (["generate", "--model", "{g}", "--prompt", "t2 t3", "--ablate", "L1H4"],
     "--ablate: head 4 out of range"),
    (["generate", "--model", "{ckpt}", "--prompt", "0 5 6", "--ablate", "L2H0"],
     "--ablate: layer 2 out of range"),
    (["generate", "--model", "{g}", "--prompt", "t2 t3", "--steer",
      "blocks.0.hook_resid_pre:{d}/v7.pt:1"], "the vector has shape (7,)"),
    (["generate", "--model", "{g}", "--prompt", "t2 t3", "--steer",
      "blocks.5.hook_resid_pre:{d}/v32.pt:1"], "it names layer 5"),
    (["generate", "--model", "{g}", "--prompt", "t2 t3", "--steer",
      "blocks.0.attn.hook_pattern:{d}/v32.pt:1"], "key axis grows"),
    (["generate", "--model", "{ckpt}", "--prompt", "0 5 6", "--steer",
      "blocks.0.hook_mlp_out:{d}/v32.pt:1"], "has no such hook"),
    (["generate", "--model", "{g}", "--prompt", "t2 t3", "--ablate", "L0H0",
      "--max-new-tokens", "62"], "ask for at most 61"),
    (["generate", "--model", "{ckpt}", "--prompt", "0 5 6", "--ablate", "L0H0",
      "--max-new-tokens", "46"], "context of 48 tokens"),
    (["generate", "--model", "{bert}", "--prompt", "t2 t3", "--ablate", "L0H0"],
     "cannot generate"),
    (["generate", "--model", "{g}", "--prompt", "t2 t3", "--ablate", "L0H0", "--stop", "t4 t5"],
     "--stop"),
    (["features", "--model", "{g}", "--dictionary", "{d}/dict64"],
     "the dictionary reads 64 values at blocks.1.hook_resid_pre"),
    (["ablate", "--model", "{g}", "--prompt", "t2 t3", "--heads", "L7H0"],
     "--heads: layer 7 out of range"),
    (["patch", "--model", "{g}", "--clean", "t2 t3", "--corrupted", "t2 t4", "--logit-diff",
      "t5,t6", "--heads", "L0H9"], "--heads: head 9 out of range"),
    (["atlas", "--model", "{ckpt}", "--heads", "L3H0"], "--heads: layer 3 out of range"),
    (["features", "--model", "{ckpt}", "--dictionary", "{d}/dict128", "--seq-len", "100"],
     "--seq-len 100 is past"),  # before: clamped to 48 silently
    (["train", "dictionary", "--model", "{ckpt}", "--steps", "5"],
     "--steps is for `interp train induction`"),  # before: ignored silently
    (["train", "induction", "--hook", "blocks.0.hook_resid_pre"],
     "--hook is for `interp train dictionary`"),
    (["attention", "--model", "{g}", "--prompt", "t2 t3", "--heads", "L0H4"],
     "--heads: head 4 out of range"),
]  # fmt: skip


@pytest.mark.parametrize("argv, message", CASES, ids=[m for _, m in CASES])
def test_config_only_checks_come_before_the_weights_load(folders, tmp_path, capsys, argv, message):
    suffix = {"features": "p.html", "atlas": "a.html", "attention": "a.html"}.get(argv[0], "t.csv")
    argv = [a.format(**folders) for a in argv] + ["--out", str(tmp_path / suffix)]
    err = one_line(capsys, argv, message)
    assert "damaged" not in err and "incomplete" not in err, err
    assert listing(tmp_path) == []


def test_a_spec_holds_the_sizes_the_loaded_model_has(folders, induction_model):
    """The config-only sizes are the loaded model's, for our checkpoint and a GPT-2 folder."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from interp.models.loader import load_model

    spec = model_spec_of("induction-2l")
    cfg = induction_model.cfg
    for f in ("n_layers", "n_heads", "d_model", "d_head", "d_vocab", "n_ctx"):
        assert getattr(spec, f) == getattr(cfg, f), f
    assert spec.causal and not spec.bridge
    assert set(induction_model.hook_dict) == set(spec.known_hooks())
    good = folders["d"] / "good"
    GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64, vocab_size=30)
                    ).save_pretrained(good)  # fmt: skip
    shutil.copy(folders["g"] / "tokenizer.json", good / "tokenizer.json")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (folders["g"] / name).exists():
            shutil.copy(folders["g"] / name, good / name)
    model = load_model(good)
    spec = model_spec(good)
    for f in ("n_layers", "n_heads", "d_model", "d_head", "d_vocab", "n_ctx"):
        assert getattr(spec, f) == getattr(model.cfg, f), f
    for hook in spec.known_hooks():  # every hook a spec is sure of, the bridge has
        assert hook in model.hook_dict, hook
    for hook in ("blocks.0.hook_resid_pre", "blocks.1.attn.hook_z", "blocks.0.attn.hook_q"):
        _, cache = model.run_with_cache(torch.tensor([[0, 3, 4]]), names_filter=hook)
        assert tuple(cache[hook].shape[2:]) == per_position_shape(spec, hook), hook
    assert model_spec(folders["bert"]).causal is False


def test_a_config_without_sizes_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(InterpError, match="names no layer count"):
        model_spec(tmp_path)
