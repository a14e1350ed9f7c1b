"""scripts/dev.sh (make dev): Ctrl-C stops dagster dev and the MLflow UI, and whatever does not stop is killed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEV_SH = REPO / "scripts" / "dev.sh"
sys.path.insert(0, str(REPO / "scripts"))

from ui_walk import alive, descendants  # noqa: E402  (the walk stops the same servers)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def start(tmp_path: Path, venv: Path, **env: str) -> tuple[subprocess.Popen, int, int]:
    dagster_port, mlflow_port = free_port(), free_port()
    environ = {
        **os.environ,
        "LOCUS_HOME": str(tmp_path / "home"),
        "DAGSTER_PORT": str(dagster_port),
        "MLFLOW_PORT": str(mlflow_port),
        "VENV": str(venv),
        **env,
    }
    log = open(tmp_path / "dev.log", "wb")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(
        [str(DEV_SH)],
        env=environ,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # like a terminal: Ctrl-C reaches the script, not its jobs
        preexec_fn=_default_stop_signals,
    )
    return proc, dagster_port, mlflow_port


def _default_stop_signals() -> None:
    """SIGINT and SIGTERM as a terminal or a service manager gives them: a test run started in the background
    (``cmd &`` in a script, nohup) inherits SIGINT ignored, and in the whole suite SIGTERM arrived ignored too (set by
    code an earlier test ran in this process); bash can never trap a signal ignored on entry, so dev.sh would not see
    the stop."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def stop_and_measure(proc: subprocess.Popen, pids: set[int], limit_s: float, sig: int = signal.SIGINT) -> float:
    started = time.monotonic()
    proc.send_signal(sig)
    while (proc.poll() is None or alive(pids)) and time.monotonic() - started < limit_s + 5:
        time.sleep(0.1)
    return time.monotonic() - started


def kill_all(proc: subprocess.Popen, pids: set[int]) -> None:
    for pid in alive(pids | {proc.pid}):
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except OSError:
            pass
    proc.wait(timeout=10)


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_ctrl_c_stops_both_servers_within_15_s(tmp_path: Path) -> None:
    venv = Path(sys.executable).parent.parent
    if not (venv / "bin" / "dagster").exists() or not (venv / "bin" / "mlflow").exists():
        pytest.skip(f"dagster and mlflow are not installed in {venv}")
    proc, dagster_port, mlflow_port = start(tmp_path, venv)
    pids: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while not (answers(dagster_port, "/server_info") and answers(mlflow_port, "/health")):
            assert proc.poll() is None, (tmp_path / "dev.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (
                "servers did not answer in 180 s\n" + (tmp_path / "dev.log").read_text()[-3000:]
            )
            time.sleep(1)
        pids = descendants(proc.pid)
        assert len(pids) >= 2
        took = stop_and_measure(proc, pids, 15)
        log = (tmp_path / "dev.log").read_text()
        assert proc.poll() is not None and not alive(pids), (
            f"left running after {took:.1f} s: {alive(pids)}\n{log[-3000:]}"
        )
        assert took <= 15, log[-3000:]
        assert not answers(dagster_port, "/server_info") and not answers(mlflow_port, "/health")
        assert "stopped." in log
    finally:
        kill_all(proc, pids)


def stubborn_venv(tmp_path: Path) -> Path:
    """A venv whose dagster and mlflow are stand-ins that ignore SIGINT and SIGTERM."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    # the project's python (a wrapper, not a symlink: a symlinked interpreter outside its venv loses the venv's
    # packages, and the script's link and home steps import the pipeline)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    stubborn = "#!/usr/bin/env bash\ntrap '' INT TERM\nsleep 300 & sleep 300\n"  # a child too: the whole group goes
    for name in ("dagster", "mlflow"):
        (venv / "bin" / name).write_text(stubborn)
        (venv / "bin" / name).chmod(0o755)
    return venv


@pytest.mark.parametrize(
    "sig, grace, waited", [(signal.SIGINT, {"STOP_GRACE_S": "2"}, 2), (signal.SIGTERM, {"STOP_GRACE_S": "30"}, 3)]
)  # TERM_GRACE_S: 3
def test_servers_that_ignore_the_stop_are_killed(tmp_path: Path, sig, grace, waited) -> None:
    """Stand-ins for dagster and mlflow that ignore SIGINT and SIGTERM: the script SIGKILLs their groups, after
    STOP_GRACE_S on Ctrl-C and after TERM_GRACE_S (3 s) on SIGTERM, whatever STOP_GRACE_S is (the grace it waited is
    in its log; no clock is asserted on: the wait below is only a deadline for the processes to go)."""
    venv = stubborn_venv(tmp_path)
    proc, _, _ = start(tmp_path, venv, **grace)
    pids: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while len(pids := descendants(proc.pid)) < 4:  # two stand-ins, each with a sleeping child
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "dev.log").read_text()
            time.sleep(0.2)
        stop_and_measure(proc, pids, waited + 30, sig)
        log = (tmp_path / "dev.log").read_text()
        assert proc.poll() is not None and not alive(pids), f"left {alive(pids)}\n{log}"
        assert log.count(f"did not stop within {waited} s: SIGKILL") == 2 and "stopped." in log, log
    finally:
        kill_all(proc, pids)


RUN_A_JOB = """
import dagster as dg
from locus_pipeline.instance import prepare_dagster_home
from pathlib import Path
import sys

@dg.asset
def tiny() -> int:
    return 1

with dg.DagsterInstance.from_config(str(prepare_dagster_home(Path(sys.argv[1])))) as instance:
    result = dg.materialize([tiny], instance=instance)
    events = instance.all_logs(result.run_id)
    steps = [e for e in events if e.dagster_event and e.dagster_event.event_type_value == "STEP_START"]
    print("stored STEP_START events:", len(steps))
"""


def test_runs_print_no_debug_lines_but_store_every_event(tmp_path: Path) -> None:
    """The repository's dagster.yaml sets the runs' console logger to INFO (make dev printed ~200 DEBUG lines in
    30 minutes: every step event of every sensor-launched run); the event log (the UI) still has every event."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", RUN_A_JOB, str(tmp_path / "home")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    printed = out.stdout + out.stderr
    assert "stored STEP_START events: 1" in printed
    assert " - DEBUG - " not in printed, [line for line in printed.splitlines() if " - DEBUG - " in line][:5]
    # the run's start and end are on the console (dagster.yaml's lifecycle handler), its step events are not
    assert (
        " - EVENT - " in printed
        and "RUN_START" in printed
        and "RUN_SUCCESS" in printed
        and " - STEP_START - " not in printed
    )
