"""The shipped denoiser's transformer on ONNX Runtime int8 (llm.onnx_encoder): exported once and
cached, close to float32 PyTorch, the same cleanup quality on Disfl-QA dev, clear errors."""

import os

import jiwer
import pytest
import torch

from llm import canvas as cv
from llm.data import load_disfl_qa
from llm.local import LocalDiffusionLM
from llm.model import load_diffusion_model
from llm.onnx_encoder import OnnxEncoder, onnx_int8_encoder


@pytest.fixture(scope="module")
def float_lm():
    return LocalDiffusionLM.from_pretrained(None, device="cpu", quantize="none")


@pytest.fixture(scope="module")
def onnx_lm():
    return LocalDiffusionLM.from_pretrained(None, device="cpu", runtime="onnxruntime")


def canvas_inputs(lm, texts):
    layouts = [cv.cleanup_layout(lm.tasks.encode(t), lm.tasks.ids) for t in texts]
    prompt, canvas, kwargs = lm.tasks._batch(layouts)
    return {"input_ids": torch.cat([prompt, canvas], dim=1), **kwargs}


def test_export_is_cached_and_close_to_float32(float_lm, tmp_path):
    encoder = onnx_int8_encoder(float_lm.loaded.model, cache_dir=tmp_path, threads=1)
    (path,) = tmp_path.glob("encoder-*-int8.onnx")
    stamp = os.stat(path).st_mtime_ns
    again = onnx_int8_encoder(float_lm.loaded.model, cache_dir=tmp_path, threads=1)
    assert again.path == encoder.path and os.stat(path).st_mtime_ns == stamp  # read, not exported again
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left

    inputs = canvas_inputs(float_lm, ["um what is the uh capital of France", "call mom"])
    mask = inputs["attention_mask"].bool()
    with torch.no_grad():
        reference = float_lm.loaded.model.bert(**inputs).last_hidden_state[mask]
    hidden = encoder(**inputs).last_hidden_state[mask]
    assert hidden.dtype == torch.float32 and hidden.shape == reference.shape
    cosine = torch.nn.functional.cosine_similarity(hidden, reference, dim=-1)
    assert cosine.min() > 0.98, cosine.min()


def test_onnx_runtime_cleans_disfl_qa_as_well_as_pytorch_int8(onnx_lm, shipped_lm):
    assert isinstance(onnx_lm.loaded.model.bert, OnnxEncoder)
    assert (onnx_lm.loaded.quantized, onnx_lm.loaded.runtime) == ("int8", "onnxruntime")
    pairs = load_disfl_qa("dev")[:48]
    texts, refs = [p.disfluent for p in pairs], [p.fluent for p in pairs]
    ours = [out for i in range(0, 48, 8) for out in onnx_lm.cleanup_batch(texts[i:i + 8])]
    theirs = [out for i in range(0, 48, 8) for out in shipped_lm.cleanup_batch(texts[i:i + 8])]
    assert sum(a == b for a, b in zip(ours, theirs)) >= 44  # int8 rounding flips a borderline edit now and then
    assert abs(jiwer.wer(refs, ours) - jiwer.wer(refs, theirs)) < 0.02
    assert jiwer.wer(refs, ours) < 0.25


def test_runtime_choices_are_checked(tiny_model_dir):
    with pytest.raises(ValueError, match="unknown runtime 'tensorrt'"):
        load_diffusion_model(None, device="cpu", runtime="tensorrt")
    with pytest.raises(ValueError, match="int8 on the CPU only"):
        load_diffusion_model(None, device="cpu", quantize="none", runtime="onnxruntime")
    with pytest.raises(ValueError, match="chat layout"):
        load_diffusion_model(tiny_model_dir, device="cpu", quantize="int8", runtime="onnxruntime")
    # auto: ONNX Runtime only where PyTorch runs on one thread
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert load_diffusion_model(None, device="cpu", runtime="auto").runtime == "torch"
        torch.set_num_threads(1)
        assert load_diffusion_model(None, device="cpu", runtime="auto").runtime == "onnxruntime"
        assert load_diffusion_model(tiny_model_dir, device="cpu", runtime="auto").runtime == "torch"
    finally:
        torch.set_num_threads(threads)


def test_a_corrupt_cached_file_is_exported_again(float_lm, tmp_path, caplog):
    encoder = onnx_int8_encoder(float_lm.loaded.model, cache_dir=tmp_path, threads=1)
    (path,) = tmp_path.glob("encoder-*-int8.onnx")
    path.write_bytes(b"garbage")
    again = onnx_int8_encoder(float_lm.loaded.model, cache_dir=tmp_path, threads=1)
    assert "unreadable" in caplog.text and path.stat().st_size > 1_000_000
    inputs = canvas_inputs(float_lm, ["uh call mom"])
    assert torch.equal(again(**inputs).last_hidden_state, encoder(**inputs).last_hidden_state)


def test_an_unwritable_cache_exports_to_a_temporary_folder(float_lm, tmp_path, caplog):
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache folder should be")
    encoder = onnx_int8_encoder(float_lm.loaded.model, cache_dir=blocked / "onnx", threads=1)
    assert "cannot write the ONNX cache" in caplog.text
    assert encoder(**canvas_inputs(float_lm, ["uh call mom"])).last_hidden_state.shape[-1] == 256
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]


def test_auto_falls_back_to_pytorch_when_onnx_runtime_fails(monkeypatch, caplog):
    import llm.onnx_encoder

    def broken(model, *args, **kwargs):
        raise ImportError("no onnxruntime here")

    monkeypatch.setattr(llm.onnx_encoder, "onnx_int8_encoder", broken)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        loaded = load_diffusion_model(None, device="cpu", runtime="auto")
    finally:
        torch.set_num_threads(threads)
    assert loaded.runtime == "torch" and "using PyTorch int8" in caplog.text
    assert type(loaded.model.bert).__name__ == "BertModel"
    with pytest.raises(ImportError, match="no onnxruntime"):
        load_diffusion_model(None, device="cpu", runtime="onnxruntime")
