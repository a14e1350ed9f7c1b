"""The ONNX builds of a transformer encoder (runtimes onnx-fp32 and onnx-int8): exported from the installed weights
with torch's ONNX exporter, fused by onnxruntime's BERT optimizer, quantized to int8 per channel; offline, once
(``make setup`` runs ``python -m locus_model.data.encoding prepare``; otherwise on first use), into
``$LOCUS_ONNX_DIR``, ``<venv>/share/locus/onnx`` or the user cache, named by the weights' sha256 and the
onnxruntime version.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
import uuid
import warnings
from functools import lru_cache
from pathlib import Path

from locus_model.data.encoders import EncoderSpec, model_folder, resolve_encoder, user_cache_dir


def _weights_file(spec: EncoderSpec) -> Path:
    folder = model_folder(spec)
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"no weights (model.safetensors) in {folder}; reinstall the encoder's package")


@lru_cache(maxsize=8)
def _weights_digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


def onnx_dirs() -> list[Path]:
    """Where ONNX builds are looked for, in order: ``$LOCUS_ONNX_DIR``, ``<venv>/share/locus/onnx`` (make setup
    builds there), the user cache."""
    dirs = [Path(os.environ["LOCUS_ONNX_DIR"])] if os.environ.get("LOCUS_ONNX_DIR") else []
    return dirs + [Path(sys.prefix) / "share" / "locus" / "onnx", user_cache_dir("encoders", "onnx")]


def onnx_model_path(encoder: str, runtime: str) -> Path:
    """The ONNX file of (encoder, onnx runtime), built on first use (see :func:`build_onnx`). Builds are named by
    the weights' sha256 and the onnxruntime version, so a changed package never reuses a stale build."""
    import onnxruntime  # why: the export stack (onnx, torch, transformers) only at setup

    spec = resolve_encoder(encoder)
    weights = _weights_file(spec)
    st = weights.stat()
    name = f"{spec.name}-{_weights_digest(str(weights), st.st_size, st.st_mtime_ns)}-ort{onnxruntime.__version__}"
    file = f"{runtime.removeprefix('onnx-')}.onnx"
    for folder in onnx_dirs():
        if (folder / name / file).exists():
            return folder / name / file
    for folder in onnx_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / f".probe-{uuid.uuid4().hex}"
            probe.touch()
            probe.unlink()
        except OSError:
            continue  # not writable (a read-only venv): the next place
        return build_onnx(spec.name, folder / name) / file
    raise OSError(f"no writable folder for the ONNX build of {spec.name} among {onnx_dirs()}; set LOCUS_ONNX_DIR")


def build_onnx(encoder: str, target: Path) -> Path:
    """Export the encoder (transformer + mean pooling + l2 normalisation, one graph: token ids and attention mask
    in, unit-norm sentence encodings out) with torch's ONNX exporter, fuse it with onnxruntime's BERT optimizer
    (``fp32.onnx``) and quantize its weights to int8 per channel (``int8.onnx``). Built in a staging folder
    and renamed into ``target`` (under a lock: concurrent first uses build once). Offline: only the installed
    weights are read."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "int8.onnx").exists():
            return target
        staging = target.parent / f".build-{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            _export(resolve_encoder(encoder), staging)
            staging.rename(target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return target


def _export(spec: EncoderSpec, folder: Path) -> None:

    import onnx  # why: the export stack only at setup
    import torch  # why: the export stack only at setup
    from onnxruntime.quantization import QuantType, quantize_dynamic  # why: the export stack only at setup
    from onnxruntime.transformers.optimizer import optimize_model  # why: the export stack only at setup

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoConfig, AutoModel  # why: the export stack only at setup

    source = model_folder(spec)
    # eager attention: plain MatMul/Softmax, which the optimizer fuses into its Attention kernel
    transformer = AutoModel.from_pretrained(str(source), attn_implementation="eager").eval()
    config = AutoConfig.from_pretrained(str(source))

    class MeanPooled(torch.nn.Module):  # sentence-transformers' Transformer -> Pooling(mean) -> Normalize
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, D)
            kwargs = {"token_type_ids": torch.zeros_like(input_ids)} if config.type_vocab_size > 1 else {}
            h = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state  # (B, T, D)
            mask = attention_mask.unsqueeze(-1).to(h.dtype)  # (B, T, 1)
            pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    raw = folder / "exported.onnx"
    example = (torch.ones(2, 8, dtype=torch.long), torch.ones(2, 8, dtype=torch.long))
    axes = {
        "input_ids": {0: "batch", 1: "tokens"},
        "attention_mask": {0: "batch", 1: "tokens"},
        "encoding": {0: "batch"},
    }
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice; its graph fuses best
        torch.onnx.export(
            MeanPooled(transformer),
            example,
            str(raw),
            input_names=["input_ids", "attention_mask"],
            output_names=["encoding"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    optimized = optimize_model(
        str(raw), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size
    )
    optimized.save_model_to_file(str(folder / "fp32.onnx"))
    raw.unlink()
    quantize_dynamic(
        str(folder / "fp32.onnx"),
        str(folder / "int8.onnx"),
        weight_type=QuantType.QInt8,
        per_channel=True,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
