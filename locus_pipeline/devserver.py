"""Start and stop a real `dagster dev` (webserver + daemon) on a LOCUS_HOME: used by tests and benchmarks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from locus_pipeline.home_location import REPO_ROOT
from locus_pipeline.instance import RUN_CREATION_ENV, prepare_dagster_home
from locus_pipeline.storage import LocusHome


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dagster_dev(home: Path, log_path: Path, *, port: int | None = None) -> tuple[subprocess.Popen, int]:
    """`dagster dev` on 127.0.0.1 in its own process group (so SIGINT reaches it), DAGSTER_HOME=<home>/dagster."""
    port = port or free_port()
    LocusHome(root=str(home)).write_ui_config(dagster_url=f"http://127.0.0.1:{port}")  # the links it writes (ui.json)
    env = {
        **os.environ,
        "LOCUS_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "DAGSTER_HOME": str(prepare_dagster_home(home)),
        **RUN_CREATION_ENV,
    }
    dagster = str(Path(sys.executable).parent / "dagster")
    proc = subprocess.Popen(
        [dagster, "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=Path(log_path).open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return proc, port


def stop_dagster_dev(proc: subprocess.Popen, timeout_s: float = 30) -> None:
    """SIGINT to the process group (a clean stop takes ~3 s), SIGKILL if it does not stop in time."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
