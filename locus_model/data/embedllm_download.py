"""Download EmbedLLM's files from the Hugging Face Hub at the pinned revision, or say how to fetch them by hand."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from locus_model.data.embedllm_files import (
    EMBEDLLM_FILES,
    EMBEDLLM_REPO_ID,
    EMBEDLLM_REVISION,
    embedllm_url,
    is_embedllm_folder,
)


class EmbedLLMDownloadError(ConnectionError):
    """The Hub could not be reached (offline mode, no network, DNS failure); says how to get the files by hand."""


def _manual_fix(dest: Path, revision: str) -> str:
    return (
        f"download {', '.join(EMBEDLLM_FILES)} from {embedllm_url(revision)} (on each file's page, the "
        f"'download' link) and put them in {dest}, then read it with read_embedllm({str(dest)!r}); or rerun "
        "download_embedllm where huggingface.co is reachable (unset HF_HUB_OFFLINE)"
    )


def _offline() -> bool:
    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return any(str(v).strip().upper() in {"1", "ON", "YES", "TRUE"} for v in flags if v)


def _reachable(url: str, timeout_s: float) -> str | None:
    """None when a TCP connection to url's host (or the https proxy) opens within timeout_s, else why not.

    Runs in a daemon thread so that a slow DNS resolver cannot stall the caller past the timeout.
    """
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    target = urlparse(proxy if proxy and url.startswith("https") else url)
    host = target.hostname or ""
    port = target.port or (443 if target.scheme == "https" else 80)
    result: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            result.append(None)
        except OSError as err:
            result.append(f"{type(err).__name__}: {err}")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not result:
        return f"no answer from {host}:{port} within {timeout_s:g} s"
    return None if result[0] is None else f"cannot connect to {host}:{port} ({result[0]})"


def download_embedllm(dest: Path | str, *, revision: str = EMBEDLLM_REVISION, timeout_s: float = 30) -> Path:
    """Download EmbedLLM's five CSV files (~3.3 GB) at a pinned revision into dest; return dest.

    Uses huggingface_hub.hf_hub_download(repo_type="dataset", revision=revision, local_dir=dest) for each
    file, so interrupted downloads resume. A dest that already holds the five files is returned without
    touching the network. Offline (HF_HUB_OFFLINE=1), with no route to the endpoint (HF_ENDPOINT or
    huggingface.co) or on DNS failure it raises EmbedLLMDownloadError within about timeout_s (the
    reachability probe waits at most min(timeout_s, 10) s), saying where to get the files by hand and where
    to put them. The large .pth tensors of the dataset are not fetched; LOCUS encodes queries itself.
    """
    # why: the hub client only for a download (users with network)
    from huggingface_hub import constants, hf_hub_download

    dest = Path(dest)
    if is_embedllm_folder(dest):
        return dest
    fix = _manual_fix(dest, revision)
    if _offline():
        raise EmbedLLMDownloadError(f"cannot download EmbedLLM: HF_HUB_OFFLINE is set. How to fix: {fix}")
    endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")  # env read now, not at import
    why = _reachable(endpoint, min(timeout_s, 10.0))
    if why is not None:
        raise EmbedLLMDownloadError(f"cannot download EmbedLLM from {endpoint}: {why}. How to fix: {fix}")

    import httpx  # why: the hub client only for a download (users with network)
    from huggingface_hub.errors import HfHubHTTPError  # why: the hub client only for a download (users with network)

    dest.mkdir(parents=True, exist_ok=True)
    for name in EMBEDLLM_FILES:
        try:
            hf_hub_download(
                EMBEDLLM_REPO_ID,
                name,
                repo_type="dataset",
                revision=revision,
                local_dir=dest,
                endpoint=endpoint,
                etag_timeout=timeout_s,
            )
        except (OSError, HfHubHTTPError, httpx.HTTPError) as err:
            raise EmbedLLMDownloadError(
                f"downloading {name} of {EMBEDLLM_REPO_ID}@{revision} from {endpoint} failed "
                f"({type(err).__name__}: {err}). How to fix: {fix}"
            ) from err
    return dest
