"""Model configuration and the one loader for every masked-diffusion LM.

The Quicksilver checkpoint is a plain ``transformers`` ``BertForMaskedLM`` (a
bidirectional transformer with an MLM head, i.e. the denoiser of MDLM/LLaDA) saved with
``save_pretrained`` (safetensors) beside its tokenizer and a ``quicksilver.json`` that
names the sequence layout (:mod:`llm.canvas`). The same :func:`load_diffusion_model`
loads public dLLMs from a local folder or hub id:

- ``AutoModelForMaskedLM`` models (e.g. ModernBERT chat models trained with masked
  diffusion): the tokenizer's own mask token.
- ``trust_remote_code`` dLLMs that return ``logits`` from ``model(input_ids)``
  (LLaDA-8B-Instruct: mask id 126336; Dream-v0-Instruct-7B: ``<|mask|>``, 151666).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer, BertConfig

log = logging.getLogger(__name__)

#: The shipped checkpoint folder.
DEFAULT_CHECKPOINT = Path(__file__).resolve().parent / "checkpoint"
#: ``quicksilver.json`` ``format`` value of checkpoints using :mod:`llm.canvas` layouts.
QUICKSILVER_FORMAT = "quicksilver-canvas-v1"
#: Mask token ids of public dLLMs whose tokenizer does not declare one.
KNOWN_MASK_IDS = {"llada": 126336, "dream": 151666}
#: Values of the ``quantize`` option of :func:`load_diffusion_model`.
QUANTIZE_CHOICES = ("auto", "none", "int8")
#: Values of the ``runtime`` option of :func:`load_diffusion_model`.
RUNTIME_CHOICES = ("torch", "onnxruntime", "auto")


def quicksilver_config(vocab_size: int, hidden: int = 256, layers: int = 6, heads: int = 4,
                       max_positions: int = 256) -> BertConfig:
    """The BERT configuration of the Quicksilver denoiser (about 6M parameters at the defaults).

    Three token types: prompt, output slot, insertion slot (:mod:`llm.canvas`).
    """
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=max_positions,
        type_vocab_size=3,
        hidden_dropout_prob=0.05,
        attention_probs_dropout_prob=0.05,
        pad_token_id=0,
    )


@dataclass
class LoadedModel:
    """A loaded diffusion LM.

    ``layout`` is ``"quicksilver"`` for checkpoints in :mod:`llm.canvas` layouts and
    ``"chat"`` for public dLLMs prompted through their chat template.
    """

    model: torch.nn.Module
    tokenizer: object
    mask_id: int
    layout: str
    device: torch.device
    max_positions: int
    source: str
    quantized: str = "none"
    runtime: str = "torch"


def pick_device(device: str | None) -> torch.device:
    """``cuda`` when available and not overridden, else ``cpu``.

    Raises:
        ValueError: ``device`` is ``cuda`` but no CUDA device exists.
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch sees no CUDA device")
    return torch.device(device)


def pick_dtype(device: torch.device, dtype: str | torch.dtype | None) -> torch.dtype:
    """bfloat16 on GPUs that support it, float16 on older GPUs, float32 on the CPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is not None:
        return getattr(torch, dtype)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def load_diffusion_model(
    name_or_path: str | Path | None = None,
    device: str | None = None,
    dtype: str | torch.dtype | None = None,
    trust_remote_code: bool = False,
    mask_id: int | None = None,
    quantize: str = "auto",
    runtime: str = "torch",
) -> LoadedModel:
    """Load a masked-diffusion LM and its tokenizer.

    Args:
        name_or_path: a local folder or hub id; ``None`` loads the shipped checkpoint.
        device: ``"cpu"``/``"cuda"``; ``None`` picks CUDA when available.
        dtype: ``None`` picks by device (:func:`pick_dtype`).
        trust_remote_code: allow the model's own code (LLaDA, Dream).
        mask_id: override the mask token id.
        quantize: ``"int8"``: dynamic int8 quantization of every ``nn.Linear`` (weights int8
            per output channel, activations quantized per batch at run time; PyTorch
            ``quantize_dynamic``, CPU only); ``"none"``; ``"auto"`` (default): ``int8`` for a
            float32 Quicksilver checkpoint on the CPU, else ``none`` (see :func:`quantize_int8`).
        runtime: ``"torch"`` (default) or ``"onnxruntime"``: with int8, the transformer runs
            on ONNX Runtime (:func:`llm.onnx_encoder.onnx_int8_encoder`; Quicksilver checkpoints
            only). Single-threaded, as in the server's cleanup worker processes, it cleans
            Disfl-QA dev 1.46x faster than PyTorch's int8 at the same WER (0.1707) and BLEU
            (80.60 vs 80.61); on two threads the two are within 3 %. ``"auto"``: ``onnxruntime``
            for an int8 Quicksilver checkpoint when PyTorch runs on one thread, else ``torch``
            (and ``torch`` when ONNX Runtime fails, with a warning).

    Raises:
        FileNotFoundError: a local path that does not exist.
        ValueError: no mask token id can be determined; unknown ``quantize`` or ``runtime``;
            ``int8`` on CUDA; ``onnxruntime`` without int8 or for a model other than a Quicksilver checkpoint.
        OSError: ``transformers`` could not load the model (message names the source).
    """
    if quantize not in QUANTIZE_CHOICES:
        raise ValueError(f"unknown quantize {quantize!r}; expected one of {', '.join(QUANTIZE_CHOICES)}")
    if runtime not in RUNTIME_CHOICES:
        raise ValueError(f"unknown runtime {runtime!r}; expected one of {', '.join(RUNTIME_CHOICES)}")
    source = str(name_or_path or DEFAULT_CHECKPOINT)
    path = Path(source)
    looks_local = path.is_absolute() or source.startswith((".", "~")) or path.exists()
    if looks_local and not path.expanduser().exists():
        raise FileNotFoundError(f"model folder not found: {source}")
    torch_device = pick_device(device)
    torch_dtype = pick_dtype(torch_device, dtype)
    hf_logging.disable_progress_bar()  # no weight-loading bars on a CLI's stderr

    meta_file = path / "quicksilver.json"
    meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    try:
        model = AutoModelForMaskedLM.from_pretrained(
            source, dtype=torch_dtype, trust_remote_code=trust_remote_code
        )
    except ValueError:
        # LLaDA / Dream register only AutoModel in their auto_map; they still return .logits.
        model = AutoModel.from_pretrained(source, dtype=torch_dtype, trust_remote_code=trust_remote_code)
    model.to(torch_device).eval()

    if mask_id is None:
        mask_id = tokenizer.mask_token_id
    if mask_id is None:
        mask_id = KNOWN_MASK_IDS.get(getattr(config, "model_type", "").lower())
    if mask_id is None:
        raise ValueError(
            f"cannot tell the mask token id of {source}: its tokenizer has no mask token; pass mask_id"
        )
    layout = "quicksilver" if meta.get("format") == QUICKSILVER_FORMAT else "chat"
    max_positions = int(getattr(config, "max_position_embeddings", 0) or 4096)
    if quantize == "auto":
        cpu_fp32 = torch_device.type == "cpu" and torch_dtype == torch.float32
        quantize = "int8" if cpu_fp32 and layout == "quicksilver" else "none"
    auto_runtime = runtime == "auto"
    if auto_runtime:
        single = torch.get_num_threads() == 1
        runtime = "onnxruntime" if quantize == "int8" and layout == "quicksilver" and single else "torch"
    if runtime == "onnxruntime" and (quantize != "int8" or layout != "quicksilver"):
        raise ValueError("runtime='onnxruntime' runs Quicksilver checkpoints in int8 on the CPU only "
                         f"(this load: {layout} layout, quantize {quantize!r}, device {torch_device.type})")
    if quantize == "int8":
        if torch_device.type != "cpu":
            raise ValueError("quantize='int8' (dynamic int8) runs on the CPU only; use device='cpu' or quantize='none'")
        if runtime == "onnxruntime":
            try:
                from llm.onnx_encoder import onnx_int8_encoder

                model.bert = onnx_int8_encoder(model)  # the MLM head stays in PyTorch, quantized below
            except Exception as exc:  # noqa: BLE001 - "auto" falls back to PyTorch
                if not auto_runtime:
                    raise
                log.warning("ONNX Runtime could not run the LM (%s: %s); using PyTorch int8", type(exc).__name__, exc)
                runtime = "torch"
        model = quantize_int8(model)
    log.info("loaded %s (%s layout, mask id %d) on %s as %s, quantized %s, runtime %s",
             source, layout, mask_id, torch_device, torch_dtype, quantize, runtime)
    return LoadedModel(model, tokenizer, int(mask_id), layout, torch_device, max_positions, source, quantize, runtime)


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """Dynamic int8 quantization of every ``nn.Linear`` of ``model`` (PyTorch
    ``torch.ao.quantization.quantize_dynamic`` with per-output-channel weight scales; the
    post-training form of Zafrir et al. 2019, "Q8BERT"): int8 weights, activations quantized
    per batch at run time, int32 accumulation (fbgemm/x86 kernels). Replaces the Linear layers
    of ``model`` in place and returns it, for CPU inference (eval mode). The activation scale is taken
    over the whole batch, so a row's output can depend on the other rows of its batch (a
    borderline token may flip: 23 of 24 Disfl-QA cleanups identical batched and one at a
    time); float32 (``quantize="none"``) has no such effect on the argmax.

    Measured on the shipped checkpoint, 2 threads: a one-pass 32-token cleanup 23.6 ms p50 vs
    30.7 ms in float32 (``bench/llm_latency.py``); Disfl-QA dev (997) at effort low WER 0.1787 /
    BLEU 79.3 vs 0.1789 / 79.3 in float32 (per-tensor scales: 0.1803 / 79.2).
    """
    import warnings

    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.filterwarnings("ignore", message=".*quantiz.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization.*", category=DeprecationWarning)
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8,
                                inplace=True).eval()


def save_checkpoint(model, tokenizer, folder: Path, extra: dict | None = None) -> None:
    """Save ``model`` and ``tokenizer`` with ``save_pretrained`` plus ``quicksilver.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    meta = {"format": QUICKSILVER_FORMAT, **(extra or {})}
    (folder / "quicksilver.json").write_text(json.dumps(meta, indent=2) + "\n")
