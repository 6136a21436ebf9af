"""One resolver behind every model name: aliases, our checkpoints, Hugging Face folders, hub ids.

Each broken case gets its own message, and a folder is classified by what it holds.
"""

import json
import shutil

import pytest
import torch

from interp import CheckpointError, InterpError
from interp.core.paths import INDUCTION_CHECKPOINT, data_dir
from interp.models import load_model
from interp.models.loader import classify


def test_aliases_and_kinds():
    assert classify("induction-2l") == classify("smollm2-135m") == "alias"
    assert classify(data_dir() / INDUCTION_CHECKPOINT) == "checkpoint"
    assert load_model("induction-2l").cfg.n_layers == 2


@pytest.mark.parametrize(
    "name, message",
    [
        (None, "needs a model name or path"),
        ("", "empty model name"),
        ("nope", "unknown model 'nope'; aliases: induction-2l, smollm2-135m, minilm-l6"),
        ("./nowhere", "model folder './nowhere' not found"),
        ("/tmp/interp-no/such/model", "not found"),
    ],
)
def test_names_that_are_nothing(name, message):
    with pytest.raises(InterpError, match=message.replace("(", r"\(")):
        load_model(name)


def test_hub_ids_fail_fast_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InterpError, match="hub is unreachable .* offline aliases"):
        load_model("someone/some-model")


def test_folders_are_classified_by_what_they_hold(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(InterpError, match="neither an interp checkpoint nor a Hugging Face model"):
        load_model(tmp_path)
    (tmp_path / "f").write_text("x")
    with pytest.raises(InterpError, match="is a file"):
        load_model(tmp_path / "f")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    with pytest.raises(InterpError, match="without model_type"):
        load_model(hf)


@pytest.fixture
def ckpt(tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(data_dir() / INDUCTION_CHECKPOINT, dst)
    return dst


def test_a_damaged_checkpoint_is_reported_as_one(ckpt):
    (ckpt / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_model(ckpt)
    shutil.copy(data_dir() / INDUCTION_CHECKPOINT / "config.json", ckpt / "config.json")
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="incomplete: it has no model.safetensors"):
        load_model(ckpt)


def test_weights_without_a_config_are_an_incomplete_checkpoint(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(CheckpointError, match="incomplete: it has no config.json"):
        load_model(ckpt)


def saved_gpt2(folder, tokenizer=True):
    """A small GPT-2 saved the way a user saves one (a plain Hugging Face model)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from interp.models.hf_tokenizers import word_tokenizer

    torch.manual_seed(0)
    hf = GPT2LMHeadModel(
        GPT2Config(
            n_layer=2,
            n_embd=32,
            n_head=4,
            n_positions=64,
            vocab_size=30,
            bos_token_id=0,
            eos_token_id=1,
        )
    ).eval()
    hf.save_pretrained(folder)
    if tokenizer:
        word_tokenizer(30).save_pretrained(folder)
    return hf


def test_a_saved_hugging_face_folder_loads_with_its_class(tmp_path):
    hf = saved_gpt2(tmp_path / "g")
    again = load_model(tmp_path / "g")
    toks = torch.tensor([[0, 5, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(again(toks), hf(toks).logits)
    assert getattr(again, "interp_logits_meaningful", True)
    assert again.to_tokens("t5 t12 t19 t20").tolist() == [[0, 5, 12, 19, 20]]  # t12 is one token


def test_an_encoder_folder_without_an_lm_head_refuses_loss(tmp_path, capsys):
    """MiniLM's own folder (BertModel): loaded as an encoder; loss is refused, not made up."""
    from interp.analysis.components.ablation import ablate_heads
    from interp.models.pretrained import package_dir

    src = package_dir("minilm-l6") / "model"
    model = load_model(src)
    assert model.interp_logits_meaningful is False
    assert "no language-model head" in capsys.readouterr().err
    toks = model.to_tokens("the river bank")
    with pytest.raises(InterpError, match="logits are meaningless"):
        ablate_heads(model, toks)


def test_incomplete_hugging_face_weights_are_an_error(tmp_path):
    from safetensors.torch import load_file, save_file

    d = tmp_path / "g"
    saved_gpt2(d)
    state = load_file(d / "model.safetensors")
    save_file(
        {k: v for k, v in state.items() if ".h.1." not in k},
        d / "model.safetensors",
        metadata={"format": "pt"},
    )
    with pytest.raises(
        CheckpointError, match="incomplete: .* weights of the model body are missing"
    ):
        load_model(d)


def test_dtype_and_device_options():
    model = load_model("induction-2l", dtype="float64")
    assert model.W_Q.dtype == torch.float64
    with pytest.raises(InterpError, match="unknown dtype"):
        load_model("induction-2l", dtype="float8")
    with pytest.raises(InterpError, match="device or device_map, not both"):
        load_model("induction-2l", device="cpu", device_map="auto")
    with pytest.raises(InterpError, match="device_map is for Hugging Face models"):
        load_model("induction-2l", device_map="auto")


def test_models_list(tmp_path):
    from interp.models import list_models

    rows = {r["alias"]: r for r in list_models()}
    assert rows["induction-2l"]["state"] == "shipped"
    assert rows["smollm2-135m"]["state"].startswith("cache ")
    assert json.dumps(rows)  # plain values


def test_analyses_run_in_bfloat16_close_to_float32():
    """bfloat16 keeps ~3 significant digits: scores agree to 0.02, ablation deltas to 5%."""
    from interp.analysis import ablate_heads, head_scores
    from interp.datasets import repeated_tokens

    data = repeated_tokens(32, d_vocab=64, seq_len=48, segment_lengths=(8, 12), seed=1)
    f32, b16 = load_model("induction-2l"), load_model("induction-2l", dtype="bfloat16")
    assert b16.W_Q.dtype == torch.bfloat16
    s32, s16 = head_scores(f32, data.tokens), head_scores(b16, data.tokens)
    assert (s32.iloc[:, 3:] - s16.iloc[:, 3:]).abs().max().max() < 0.02
    a32 = ablate_heads(f32, data.tokens, loss_mask=data.loss_mask).set_index("label")["effect"]
    a16 = ablate_heads(b16, data.tokens, loss_mask=data.loss_mask).set_index("label")["effect"]
    big = a32.abs() > 1
    assert ((a16[big] - a32[big]).abs() / a32[big].abs()).max() < 0.05
