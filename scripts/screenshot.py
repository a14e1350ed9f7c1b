#!/usr/bin/env python3
"""Headless-Chromium look at a page: a PNG screenshot and, optionally, the DOM after its scripts ran.

    python scripts/screenshot.py URL OUT.png [--dom OUT.html] [--width 1280] [--height 900] [--wait-ms 8000]

URL may be a file (the atlas) or a served page (the Dagster UI at http://127.0.0.1:$DAGSTER_PORT, the MLflow UI at
http://127.0.0.1:$MLFLOW_PORT). Needs Debian's `chromium` and `chromium-driver` (README, Tests; ~30 s to install;
../shared/docs/stack.md); exits 3 with that hint when it is missing. The tests run it only where it is installed.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def capture(
    url: str,
    png: Path,
    *,
    dom: Path | None = None,
    width: int = 1280,
    height: int = 900,
    wait_ms: int = 8000,
    timeout_s: float = 120,
) -> None:
    """Write the screenshot to ``png`` (and the rendered DOM to ``dom``); raise with Chromium's stderr on failure."""
    exe = chromium()
    if exe is None:
        raise FileNotFoundError("chromium is not installed (Debian's chromium and chromium-driver: README, Tests)")
    if Path(url).exists():
        url = Path(url).resolve().as_uri()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        common = [
            exe,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--virtual-time-budget={wait_ms}",
        ]
        shot = subprocess.run(
            [*common, f"--screenshot={png.resolve()}", url], capture_output=True, text=True, timeout=timeout_s
        )
        if shot.returncode != 0 or not png.exists():
            raise RuntimeError(f"chromium failed on {url}: {shot.stderr[-2000:]}")
        if dom is not None:
            out = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=timeout_s)
            if out.returncode != 0:
                raise RuntimeError(f"chromium --dump-dom failed on {url}: {out.stderr[-2000:]}")
            Path(dom).write_text(out.stdout, encoding="utf-8")


class Browser:
    """One headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: commands on
    its fd 3, answers on fd 4, NUL-terminated JSON), with the standard library only. For pages that render
    client-side (the Dagster and MLflow UIs): navigate, wait until given text shows, click, read the DOM, screenshot.

        with Browser(width=1280, height=900) as b:
            b.goto(url); b.wait_for_text(["Materialize"], timeout_s=60); b.screenshot(png); html = b.dom()
    """

    def __init__(self, *, width: int = 1280, height: int = 900) -> None:
        exe = chromium()
        if exe is None:
            raise FileNotFoundError("chromium is not installed (Debian's chromium and chromium-driver: README, Tests)")
        self.width, self.height = width, height
        self._profile = tempfile.TemporaryDirectory()
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds_3_and_4() -> None:  # in the child: the pipe ends become fd 3 and fd 4 (dup'ed high first: no clash)
            r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [
                exe,
                *FLAGS,
                f"--user-data-dir={self._profile.name}",
                f"--window-size={width},{height}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=fds_3_and_4,
            start_new_session=True,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer, self._next_id, self.session = b"", 0, None
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)[
            "sessionId"
        ]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def send(self, method: str, params: dict | None = None, *, session: bool = True, timeout_s: float = 60) -> dict:
        """One DevTools command; its result (events that arrive meanwhile are dropped)."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self._next_id:
                    if "error" in answer:
                        raise RuntimeError(f"chromium: {method} failed: {answer['error']}")
                    return answer.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise TimeoutError(
                    f"chromium did not answer {method} within {timeout_s} s (exit code {self.proc.poll()})"
                )
            if select.select([self._from_browser], [], [], left)[0]:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium closed the DevTools pipe during {method}")
                self._buffer += chunk

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"javascript failed: {expression[:200]}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        if Path(url).exists():
            url = Path(url).resolve().as_uri()
        self.send("Page.navigate", {"url": url})

    def text(self) -> str:
        """The page's visible text (document.body.innerText)."""
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def wait_for_text(self, needles: list[str], *, timeout_s: float = 60, settle_s: float = 1.0) -> list[str]:
        """Wait until every needle is in the visible text (or the time is up); the needles still missing."""
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.text()
            missing = [n for n in needles if n not in text]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        time.sleep(settle_s)  # the last requests and layout
        return missing

    def click_text(self, text: str, selector: str = "button, a, [role=tab], span, div") -> bool:
        """Click the innermost element matching ``selector`` whose own text is exactly ``text``; whether one was
        found."""
        js = f"""(() => {{
          const want = {json.dumps(text)};
          const all = [...document.querySelectorAll({json.dumps(selector)})]
            .filter(e => e.innerText && e.innerText.trim() === want);
          const inner = all.filter(e => !all.some(o => o !== e && e.contains(o)));
          if (!inner.length) return false;
          inner[0].scrollIntoView(); inner[0].click(); return true; }})()"""
        return bool(self.evaluate(js))

    def dom(self) -> str:
        return self.evaluate("document.documentElement.outerHTML") or ""

    def screenshot(self, png: Path, *, full_page: bool = False) -> None:
        params: dict = {"format": "png"}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": self.width, "height": min(int(size[1]), 8000), "scale": 1},
            )
        data = self.send("Page.captureScreenshot", params)["data"]
        Path(png).parent.mkdir(parents=True, exist_ok=True)
        Path(png).write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", session=False, timeout_s=5)
                except (RuntimeError, TimeoutError, OSError):
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, 9)
                    self.proc.wait()
        finally:
            for fd in (self._to_browser, self._from_browser):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._profile.cleanup()

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
