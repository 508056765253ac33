"""The one loader: a tiny random config saved to a temporary folder (a public-dLLM-like
folder) and the shipped checkpoint."""

import json

import pytest
import torch

from llm.backend import Turn
from llm.local import LocalDiffusionLM
from llm.model import DEFAULT_CHECKPOINT, QUICKSILVER_FORMAT, load_diffusion_model


def test_tiny_folder_round_trip(tiny_model_dir):
    loaded = load_diffusion_model(tiny_model_dir, device="cpu")
    assert loaded.layout == "chat"
    assert loaded.mask_id == loaded.tokenizer.mask_token_id == 1
    assert loaded.model.dtype == torch.float32
    ids = torch.tensor([[5, 6, 7, 1, 1]])
    again = load_diffusion_model(str(tiny_model_dir), device="cpu")
    assert torch.allclose(loaded.model(input_ids=ids).logits, again.model(input_ids=ids).logits)


def test_mask_id_override_and_dtype(tiny_model_dir):
    loaded = load_diffusion_model(tiny_model_dir, device="cpu", dtype="bfloat16", mask_id=126336)
    assert loaded.mask_id == 126336
    assert loaded.model.dtype == torch.bfloat16


def test_chat_layout_generates_from_tiny_model(tiny_model_dir):
    lm = LocalDiffusionLM.from_pretrained(tiny_model_dir, device="cpu")
    drafts = list(lm.reply_drafts([Turn("assistant", "Where to?")], "book a table", "high"))
    assert len(drafts) == 64  # one draft per denoising step, one token per step
    assert all(isinstance(d, str) for d in drafts)
    assert "[MASK]" not in drafts[-1]


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="model folder not found"):
        load_diffusion_model(tmp_path / "nope", device="cpu")


def test_cuda_without_gpu_is_a_clear_error(tiny_model_dir):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="cuda"):
        load_diffusion_model(tiny_model_dir, device="cuda")


def test_shipped_checkpoint_is_a_quicksilver_bert(shipped_lm):
    meta = json.loads((DEFAULT_CHECKPOINT / "quicksilver.json").read_text())
    assert meta["format"] == QUICKSILVER_FORMAT
    assert shipped_lm.loaded.layout == "quicksilver"
    assert type(shipped_lm.loaded.model).__name__ == "BertForMaskedLM"
    assert (DEFAULT_CHECKPOINT / "model.safetensors").stat().st_size < 40e6
    assert shipped_lm.loaded.tokenizer.mask_token == "[MASK]"
