"""The Quicksilver denoiser's transformer on ONNX Runtime, int8, for CPU serving.

:func:`onnx_int8_encoder` exports the ``BertModel`` inside a Quicksilver ``BertForMaskedLM``
to ONNX (``torch.onnx.export``, TorchScript exporter, dynamic batch and sequence axes) and
quantizes it with ONNX Runtime's dynamic int8 quantization (``onnxruntime.quantization.
quantize_dynamic``: int8 weights per output channel, activations quantized per call at run time;
the same scheme as :func:`llm.model.quantize_int8`, on ONNX Runtime's MLAS kernels and graph
optimizations). The result is cached on disk, keyed by the checkpoint's weights, and replaces
``model.bert``; the MLM head stays in PyTorch, so :func:`llm.sampler.canvas_logits` still projects
onto the candidate vocabulary only.

ONNX Runtime's transformer fusions are not applied: its ``EmbedLayerNormalization`` fusion
assumes position ids ``0..n-1``, which the edit canvas does not use (:mod:`llm.canvas`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from transformers.modeling_outputs import BaseModelOutput

log = logging.getLogger(__name__)

#: Inputs of the exported encoder, all ``(batch, length)`` int64.
INPUT_NAMES = ("input_ids", "position_ids", "token_type_ids", "attention_mask")
#: Where exported encoders are kept (``$QUICKSILVER_CACHE`` or ``~/.cache/quicksilver``).
CACHE_DIR = Path(os.environ.get("QUICKSILVER_CACHE") or Path.home() / ".cache" / "quicksilver") / "onnx"


class OnnxEncoder(torch.nn.Module):
    """``BertModel.forward`` on an ONNX Runtime session.

    Called like the ``BertModel`` it replaces with the four :data:`INPUT_NAMES` tensors
    (``(batch, length)`` long, keyword arguments); returns a ``BaseModelOutput`` whose
    ``last_hidden_state`` is ``(batch, length, hidden)`` float32.

    Args:
        path: the ``.onnx`` file.
        threads: ONNX Runtime intra-op threads (default: PyTorch's ``get_num_threads()``).
    """

    def __init__(self, path: str | Path, threads: int | None = None) -> None:
        super().__init__()
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        self.path = str(path)
        self.session = ort.InferenceSession(self.path, options, providers=["CPUExecutionProvider"])

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, token_type_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> BaseModelOutput:
        feed = {"input_ids": input_ids, "position_ids": position_ids, "token_type_ids": token_type_ids,
                "attention_mask": attention_mask}
        feed = {name: np.ascontiguousarray(value.detach().cpu().numpy(), dtype=np.int64) for name, value in feed.items()}
        (hidden,) = self.session.run(["last_hidden_state"], feed)
        return BaseModelOutput(last_hidden_state=torch.from_numpy(hidden))


class _Encoder(torch.nn.Module):
    """``BertModel`` with positional inputs and a plain tensor output, for the exporter."""

    def __init__(self, bert: torch.nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, position_ids, token_type_ids, attention_mask):
        return self.bert(input_ids=input_ids, position_ids=position_ids, token_type_ids=token_type_ids,
                         attention_mask=attention_mask).last_hidden_state


def weights_key(model: torch.nn.Module) -> str:
    """A short hash of ``model``'s float state dict (names, shapes and values) and the library versions."""
    import onnxruntime

    digest = hashlib.sha256(f"{torch.__version__}/{onnxruntime.__version__}".encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def export_int8(bert: torch.nn.Module, out: Path) -> None:
    """Export float32 ``bert`` to ONNX (opset 17) and write its dynamic-int8 form to ``out``.

    Written to a temporary file first and renamed, so processes exporting at once never read
    half a file.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out.parent.mkdir(parents=True, exist_ok=True)
    example = torch.ones(1, 8, dtype=torch.long)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        float_path, int8_path = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        axes = {name: {0: "batch", 1: "length"} for name in (*INPUT_NAMES, "last_hidden_state")}
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(_Encoder(bert).eval(), (example,) * 4, str(float_path), input_names=list(INPUT_NAMES),
                              output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)
        logging.getLogger().disabled, was = True, logging.getLogger().disabled  # quantize_dynamic logs advice at root
        try:
            quantize_dynamic(str(float_path), str(int8_path), weight_type=QuantType.QInt8, per_channel=True,
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        finally:
            logging.getLogger().disabled = was
        os.replace(int8_path, out)


def onnx_int8_encoder(model: torch.nn.Module, cache_dir: Path = CACHE_DIR, threads: int | None = None) -> OnnxEncoder:
    """An :class:`OnnxEncoder` for the float32 ``BertForMaskedLM`` ``model``'s ``model.bert``,
    exported and quantized on first use (about 3 s) and read from ``cache_dir`` afterwards.

    A cached file that ONNX Runtime cannot read (truncated, corrupt) is exported again; a
    ``cache_dir`` that cannot be written is skipped (the export goes to a temporary folder,
    every time).

    Raises:
        TypeError: ``model`` has no float ``bert`` encoder.
        ImportError: ``onnxruntime`` or ``onnx`` is not installed.
    """
    bert = getattr(model, "bert", None)
    if bert is None or not any(p.is_floating_point() for p in bert.parameters()):
        raise TypeError("onnxruntime int8 needs a float BertForMaskedLM (the Quicksilver checkpoint)")
    path = Path(cache_dir) / f"encoder-{weights_key(bert)}-int8.onnx"
    try:
        if not path.exists():
            log.info("exporting the LM's encoder to ONNX int8: %s", path)
            export_int8(bert, path)
    except OSError as exc:
        log.warning("cannot write the ONNX cache %s (%s); exporting to a temporary folder", cache_dir, exc)
        with tempfile.TemporaryDirectory() as tmp:
            export_int8(bert, Path(tmp) / path.name)
            return OnnxEncoder(Path(tmp) / path.name, threads)  # the session holds the model in memory
    try:
        return OnnxEncoder(path, threads)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        log.warning("the cached ONNX encoder %s is unreadable (%s); exporting it again", path, exc)
        path.unlink(missing_ok=True)
        export_int8(bert, path)
        return OnnxEncoder(path, threads)
