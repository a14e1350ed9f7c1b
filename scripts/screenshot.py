#!/usr/bin/env python3
"""Headless-Chromium look at a page: a PNG screenshot and, optionally, the DOM after its scripts ran.

    python scripts/screenshot.py URL OUT.png [--dom OUT.html] [--width 1280] [--height 900] [--wait-ms 8000]

URL may be a file (the atlas) or a served page (the Dagster UI at http://127.0.0.1:$DAGSTER_PORT, the MLflow UI at
http://127.0.0.1:$MLFLOW_PORT). Needs Debian's `chromium` (apt-get install -y chromium chromium-driver, ~30 s;
../shared/docs/stack.md); exits 3 with that hint when it is missing. The tests run it only where it is installed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def capture(url: str, png: Path, *, dom: Path | None = None, width: int = 1280, height: int = 900,
            wait_ms: int = 8000, timeout_s: float = 120) -> None:
    """Write the screenshot to ``png`` (and the rendered DOM to ``dom``); raise with Chromium's stderr on failure."""
    exe = chromium()
    if exe is None:
        raise FileNotFoundError("chromium is not installed: apt-get install -y chromium chromium-driver")
    if Path(url).exists():
        url = Path(url).resolve().as_uri()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        common = [exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                  f"--virtual-time-budget={wait_ms}"]
        shot = subprocess.run([*common, f"--screenshot={png.resolve()}", url], capture_output=True, text=True,
                              timeout=timeout_s)
        if shot.returncode != 0 or not png.exists():
            raise RuntimeError(f"chromium failed on {url}: {shot.stderr[-2000:]}")
        if dom is not None:
            out = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=timeout_s)
            if out.returncode != 0:
                raise RuntimeError(f"chromium --dump-dom failed on {url}: {out.stderr[-2000:]}")
            Path(dom).write_text(out.stdout, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("png", type=Path)
    parser.add_argument("--dom", type=Path, default=None, help="also write the rendered DOM here")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--wait-ms", type=int, default=8000, help="virtual time the page's scripts get before capture")
    args = parser.parse_args(argv)
    try:
        capture(args.url, args.png, dom=args.dom, width=args.width, height=args.height, wait_ms=args.wait_ms)
    except FileNotFoundError as err:
        print(f"screenshot: {err}", file=sys.stderr)
        return 3
    print(args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
