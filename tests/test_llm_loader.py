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


def test_shipped_checkpoint_is_int8_on_the_cpu_and_agrees_with_float32(shipped_lm):
    """``quantize="auto"`` gives dynamic int8 Linear layers on the CPU; the int8 model picks the
    same token as float32 at nearly every output position of real Disfl-QA canvases."""
    from llm import canvas as cv
    from llm.data import load_disfl_qa
    from llm.train import collate

    assert shipped_lm.loaded.quantized == "int8"
    modules = list(shipped_lm.loaded.model.modules())
    assert not any(type(m) is torch.nn.Linear for m in modules)
    assert sum(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in modules) == 6 * 6 + 2  # 6 per layer, pooler-less head
    fp32 = load_diffusion_model(None, device="cpu", quantize="none")
    assert fp32.quantized == "none" and isinstance(fp32.model.bert.encoder.layer[0].output.dense, torch.nn.Linear)
    ids = cv.SpecialIds(fp32.tokenizer)
    texts = [p.disfluent for p in load_disfl_qa("dev")[:32]]
    layouts = [cv.cleanup_layout(fp32.tokenizer(t, add_special_tokens=False)["input_ids"], ids) for t in texts]
    batch = collate([cv.Layout(l.input_ids, l.position_ids, l.token_type_ids, l.prompt_length,
                               torch.where(l.token_type_ids > 0, l.input_ids, -100)) for l in layouts], ids.pad)
    inputs = {k: batch[k] for k in ("input_ids", "position_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        a = fp32.model(**inputs).logits
        b = shipped_lm.loaded.model(**inputs).logits
    output = batch["target"] != -100
    agreement = (a.argmax(-1) == b.argmax(-1))[output].float().mean().item()
    assert agreement > 0.97, agreement
    assert not torch.equal(a, b)  # really a different (quantized) computation


def test_quantize_option_on_other_models(tiny_model_dir):
    assert load_diffusion_model(tiny_model_dir, device="cpu").quantized == "none"  # auto: only our checkpoint
    loaded = load_diffusion_model(tiny_model_dir, device="cpu", quantize="int8")
    assert loaded.quantized == "int8"
    assert "[MASK]" not in LocalDiffusionLM(loaded).respond([], "book a table", "medium")
    with pytest.raises(ValueError, match="unknown quantize 'int4'"):
        load_diffusion_model(tiny_model_dir, device="cpu", quantize="int4")
