"""Downloading EmbedLLM: offline or unreachable fails fast with how to get the files by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from locus_model.data.embedllm_download import EmbedLLMDownloadError, download_embedllm
from locus_model.data.embedllm_files import EMBEDLLM_REVISION


@pytest.mark.parametrize(
    "env",
    [{"HF_HUB_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}],
    ids=["offline-flag", "unreachable-endpoint"],
)
def test_download_fails_fast_offline_with_manual_instructions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    tried = []  # fails fast: at the offline flag or the reachability probe, before any download is tried
    monkeypatch.setattr("huggingface_hub.hf_hub_download", lambda *a, **k: tried.append(a))
    with pytest.raises(EmbedLLMDownloadError) as info:
        download_embedllm(tmp_path / "dest", timeout_s=5)
    message = str(info.value)
    assert tried == [] and ("HF_HUB_OFFLINE is set" in message or "from http://127.0.0.1:9:" in message), message
    assert f"https://huggingface.co/datasets/RZ412/EmbedLLM/tree/{EMBEDLLM_REVISION}" in message
    assert str(tmp_path / "dest") in message and "model_order.csv" in message


def test_download_returns_a_complete_folder_without_network(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert download_embedllm(folder) == folder
