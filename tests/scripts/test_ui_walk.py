"""scripts/ui_walk.py: the UI walk of issue 19 in headless Chromium.

Both are in the end-to-end tier and need chromium (.ci/run installs it). The browser driver is tested in seconds; the
walk itself builds a tiny synthetic home (~2-3 minutes on 2 cores), starts `make dev` and visits every screen
(~4 minutes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import screenshot  # noqa: E402
import ui_walk  # noqa: E402

needs_chromium = pytest.mark.skipif(
    screenshot.chromium() is None,
    reason="chromium is not installed (Debian's chromium and chromium-driver: README, Tests)",
)


def tree(root: Path) -> dict[str, bytes | str]:
    """Every file's bytes (a symlink: its target) under ``root``, by relative path."""
    return {
        p.relative_to(root).as_posix(): (os.readlink(p) if p.is_symlink() else p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


def test_the_walk_runs_on_a_copy_and_leaves_the_users_home_as_it_was(tmp_path: Path) -> None:
    home = tmp_path / "data"
    (home / "warehouse").mkdir(parents=True)
    (home / "warehouse" / "model_embeddings.parquet").write_bytes(b"the pool")
    (home / "incoming" / "accepted").mkdir(parents=True)
    (home / "dagster").mkdir()
    (home / "dagster" / "dagster.yaml").symlink_to(ROOT / "dagster.yaml")
    (home / ".locks").mkdir()
    (home / ".locks" / "pool.lock").write_text("")
    before = tree(home)
    with ui_walk.walked_home(home) as walked:
        assert walked != home and tree(walked) == {k: v for k, v in before.items() if not k.startswith(".locks/")}
        assert (walked / "dagster" / "dagster.yaml").is_symlink()  # the link, not a copy of the file
        (walked / "incoming" / "ui-walk.csv").write_text("model,query_id\n")  # what the walk adds
        (walked / "warehouse" / "model_embeddings.parquet").write_bytes(b"the pool and ui-walk/onboarded model")
        (walked / "onboarded").mkdir()
    assert tree(home) == before and not walked.exists()
    with ui_walk.walked_home(home, in_place=True) as walked:
        assert walked == home


def test_the_walk_reads_the_ports_make_dev_reads(monkeypatch) -> None:
    monkeypatch.setenv("DAGSTER_PORT", "3931")
    monkeypatch.setenv("MLFLOW_PORT", "5031")
    args = ui_walk.parse_args(["--home", "x"])
    assert (args.dagster_port, args.mlflow_port) == (3931, 5031)
    assert ui_walk.parse_args(["--home", "x", "--dagster-port", "4000"]).dagster_port == 4000
    monkeypatch.delenv("DAGSTER_PORT")
    assert ui_walk.parse_args(["--home", "x"]).dagster_port == 0  # a free port


@needs_chromium
@pytest.mark.e2e
def test_the_browser_waits_for_text_a_script_adds_later(tmp_path: Path) -> None:
    page = tmp_path / "late.html"
    page.write_text(
        "<h1>now</h1><script>setTimeout(() => document.body.insertAdjacentHTML('beforeend', "
        "'<button onclick=\"this.textContent=`clicked`\">later</button>'), 700)</script>"
    )
    with screenshot.Browser(width=800, height=600) as browser:
        browser.goto(str(page))
        assert browser.wait_for_text(["later"], timeout_s=20, settle_s=0) == []
        assert browser.click_text("later")
        assert browser.wait_for_text(["clicked"], timeout_s=5, settle_s=0) == []
        assert browser.wait_for_text(["never shown"], timeout_s=1, settle_s=0) == ["never shown"]
        browser.screenshot(tmp_path / "late.png")
    png = (tmp_path / "late.png").read_bytes()
    assert png[:4] == b"\x89PNG" and int.from_bytes(png[16:20], "big") == 800
    assert browser.proc.poll() is not None  # closed with the context


@needs_chromium
@pytest.mark.e2e
@pytest.mark.timeout(1500)
def test_the_ui_walk_passes_every_item(tmp_path: Path) -> None:
    out = tmp_path / "walk"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "ui_walk.py"),
            "--home",
            str(tmp_path / "home"),
            "--out",
            str(out),
            "--build-tiny",
        ],
        capture_output=True,
        text=True,
        timeout=1400,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed[-6000:]
    assert [line.split(":")[0] for line in printed.splitlines() if line.startswith("PASS item")] == [
        f"PASS item {i}" for i in range(1, 13)
    ]
    assert len(list(out.glob("item*.png"))) >= 9
    assert "servers stopped in" in printed
    assert not list((tmp_path / "home" / "incoming").rglob("ui-walk*"))  # the walk ran on a copy of the home
