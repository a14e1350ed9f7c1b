"""locus onboard against locus replay on a tiny MMLU-Pro home: the onboarded row `my-copy` has the replayed model
among its nearest; every answer is logged as it arrives and never asked again; a dead endpoint changes nothing."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

import dagster as dg
import pandas as pd
import pytest

from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.live.onboard import OnboardConfig, OnboardError, onboard_endpoint
from locus_pipeline.live_cli import run_onboarding
from locus_pipeline.serve.config import read_models_config
from locus_pipeline.storage import LocusHome

REPLAYED = "gemini-1.5-pro-002"
TINY_MMLU = {
    "ops": {
        "raw_evaluations": {"config": {"source": "mmlu_pro"}},
        "evaluation_table": {"config": {"max_queries": 400}},
        "query_encodings": {"config": {"encoder": "hashing-256"}},
        "training_split": {"config": {"budget": 256}},
        "locus_checkpoint": {
            "config": {
                "epochs": 10,
                "patience": 10,
                "enc_max": 64,
                "finetune_steps": 60,
                "latent_steps": 150,
                "threads": 1,
            }
        },
    }
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# a whole MMLU-Pro home is built and onboarded through replay servers: the end-to-end tier
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocusHome]:
    """A tiny home on 400 MMLU-Pro questions (pool_job: 29 models), its Dagster instance in the home."""
    from locus_pipeline.definitions import defs

    root = tmp_path_factory.mktemp("mmlu_home")
    saved = {k: os.environ.get(k) for k in ("LOCUS_HOME", "DAGSTER_HOME")}
    os.environ["LOCUS_HOME"] = str(root)
    from locus_pipeline.instance import prepare_dagster_home

    os.environ["DAGSTER_HOME"] = str(prepare_dagster_home(root))
    with dg.instance_for_test() as instance:
        defs().resolve_job_def("pool_job").execute_in_process(instance=instance, run_config=TINY_MMLU)
    yield LocusHome(root=str(root))
    for k, v in saved.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture(scope="module")
def replay_port() -> Iterator[int]:
    import uvicorn

    from locus_pipeline.live.replay import replay_app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(replay_app(REPLAYED), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield port
    server.should_exit = True
    thread.join(5)


def models_config(tmp_path: Path, port: int, **extra) -> Path:
    path = tmp_path / "models.yaml"
    lines = [f"    {k}: {v}" for k, v in extra.items()]
    path.write_text(
        "models:\n  my-copy:\n"
        + f"    base_url: http://127.0.0.1:{port}/v1\n    model: {REPLAYED}\n"
        + "".join(line + "\n" for line in lines)
    )
    return path


def test_onboarding_a_replayed_model_finds_it_among_the_nearest(
    home: LocusHome, replay_port: int, tmp_path: Path
) -> None:
    pool_before = home.read_pool()
    config = read_models_config(models_config(tmp_path, replay_port, cost_per_query=0.001))
    start = time.monotonic()
    result = onboard_endpoint(
        home,
        OnboardConfig(endpoint="my-copy", budget=64, concurrency=8),
        config,
        publish=lambda manifest: run_onboarding(home, manifest),
        tracking=MlflowTracking(home=home),
    )
    seconds = time.monotonic() - start
    pool = home.read_pool()
    assert len(pool) == len(pool_before) + 1 and "my-copy" in set(pool["model"])
    assert REPLAYED in result.neighbours, result.neighbours
    assert result.answers == 64 and result.asked_now == 64
    assert result.failed_calls <= 12  # the replayed model has no record of 12 questions (replay's 400): not asked again
    assert result.cost_usd == pytest.approx(0.064) and result.mlflow_run_id and result.run_id
    log = home.read_live_answers("my-copy")
    assert len(log) == 64 and len({r["query_id"] for r in log}) == 64
    assert all(r["reason"] and r["prompt"].startswith("The following are") for r in log)
    print(f"onboarded in {seconds:.1f} s; nearest {result.neighbours}")

    again = onboard_endpoint(home, OnboardConfig(endpoint="my-copy", budget=64), config)
    assert again.asked_now == 0 and again.resumed == 64  # nothing asked twice


def test_a_crash_resumes_without_asking_again(home: LocusHome, replay_port: int, tmp_path: Path) -> None:
    config = read_models_config(models_config(tmp_path, replay_port))
    if len(home.read_live_answers("my-copy")) < 21:  # (when run alone)
        onboard_endpoint(home, OnboardConfig(endpoint="my-copy", budget=24), config)
    path = home.live_answers_path("my-copy")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:20]) + lines[20][:15])  # killed half-way through writing the 21st answer
    result = onboard_endpoint(home, OnboardConfig(endpoint="my-copy", budget=30, concurrency=4), config)
    assert result.resumed == 20 and result.asked_now == 10
    log = home.read_live_answers("my-copy")
    assert len({r["query_id"] for r in log}) == len([r for r in log]) == 30


def test_an_endpoint_that_fails_every_call_changes_nothing(home: LocusHome, tmp_path: Path) -> None:
    before = home.read_pool()
    path = tmp_path / "dead.yaml"
    path.write_text(f"models:\n  dead-end:\n    base_url: http://127.0.0.1:{free_port()}/v1\n    timeout_s: 2\n")
    with pytest.raises(OnboardError, match="every call of a round.*failed.*Nothing was added to the pool"):
        onboard_endpoint(home, OnboardConfig(endpoint="dead-end", budget=16, retries=1), read_models_config(path))
    pd.testing.assert_frame_equal(home.read_pool(), before)
    assert home.read_live_answers("dead-end") == []


def test_an_unknown_endpoint_names_the_entries(home: LocusHome, tmp_path: Path) -> None:
    with pytest.raises(OnboardError, match="no endpoint 'nope'.*my-copy"):
        onboard_endpoint(home, OnboardConfig(endpoint="nope"), read_models_config(models_config(tmp_path, 1)))


def test_the_dagster_job_hands_the_graded_answers_to_the_intake_for_the_drop_folder_sensor(
    home: LocusHome, replay_port: int, tmp_path: Path
) -> None:
    from locus_pipeline.definitions import defs
    from locus_pipeline.intake import DropFolder

    path = tmp_path / "job.yaml"
    path.write_text(f"models:\n  job-copy:\n    base_url: http://127.0.0.1:{replay_port}/v1\n    model: {REPLAYED}\n")
    run_config = {
        "ops": {"ask_and_drop": {"config": {"endpoint": "job-copy", "models_config": str(path), "budget": 16}}}
    }
    with dg.instance_for_test() as instance:
        result = (
            defs().resolve_job_def("live_onboarding_job").execute_in_process(instance=instance, run_config=run_config)
        )
    assert result.success
    (event,) = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    meta = event.asset_observation_data.asset_observation.metadata
    per_category, stored = meta["per_category"].value, meta["evaluation_file"].value
    assert isinstance(per_category, str) and isinstance(stored, str)
    assert meta["answers"].value == 16 and "low" in per_category
    folder = DropFolder(home)  # taken in by the intake (the job's tick): the drop-folder sensor requests its run
    assert not (folder.incoming / "live-job-copy-16.csv").exists()
    assert stored.startswith("incoming/accepted/")
    assert len(pd.read_csv(home.path / stored)) == 16


def test_the_command_line_fails_clearly(home: LocusHome, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from locus_pipeline.cli import main

    path = tmp_path / "m.yaml"
    path.write_text("models:\n  a: {base_url: http://127.0.0.1:1/v1}\n")
    assert main(["onboard", "--endpoint", "b", "--models-config", str(path), "--home", home.location]) != 0
    assert "no endpoint 'b'" in capsys.readouterr().err


def test_the_money_budget_stops_the_asking(home: LocusHome, replay_port: int, tmp_path: Path) -> None:
    path = tmp_path / "priced.yaml"
    path.write_text(
        f"models:\n  priced-copy:\n    base_url: http://127.0.0.1:{replay_port}/v1\n    model: {REPLAYED}\n"
        "    cost_per_query: 0.001\n"
    )
    result = onboard_endpoint(
        home, OnboardConfig(endpoint="priced-copy", budget=64, max_cost=0.0205), read_models_config(path)
    )
    assert result.answers == 20 and result.stopped_by == "max_cost" and result.cost_usd == pytest.approx(0.020)
    unpriced = models_config(tmp_path, replay_port)
    with pytest.raises(OnboardError, match="--max-cost needs a price"):
        onboard_endpoint(home, OnboardConfig(endpoint="my-copy", max_cost=1.0), read_models_config(unpriced))


def two_copies(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "copies.yaml"
    path.write_text(
        "models:\n"
        + "".join(
            f"  {name}:\n    base_url: http://127.0.0.1:{port}/v1\n    model: {REPLAYED}\n"
            for name in ("round-copy", "until-copy")
        )
    )
    return path


def test_the_command_asks_in_rounds_prints_each_and_stops_at_the_budget(
    home: LocusHome, replay_port: int, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from locus_pipeline.cli import main

    path = two_copies(tmp_path, replay_port)
    assert (
        main(
            [
                "onboard",
                "--endpoint",
                "round-copy",
                "--models-config",
                str(path),
                "--home",
                home.location,
                "--budget",
                "24",
                "--choice",
                "adaptive",
                "--until",
                "0.5",
                "--no-mlflow",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    progress = [line for line in out.splitlines() if "widest 90% interval" in line]
    counts = [int(line.split(" answers")[0]) for line in progress]  # a question the replay has no answer to fails
    assert len(counts) >= 3 and counts == sorted(counts) and counts[-1] == 24
    refused = [line for line in out.splitlines() if line.startswith("refused answer to ")]  # one line each, no trace
    assert all("HTTP 400" in line and "no recorded answer" in line for line in refused) and "Traceback" not in out
    lines = [line for line in out.splitlines() if not line.startswith("refused answer to ")]
    assert "stopped by budget" in out and "90% interval" in lines[len(progress) + 1]
    assert len(home.read_live_answers("round-copy")) == 24


def test_until_stops_at_the_first_round_whose_intervals_are_all_that_narrow(
    home: LocusHome, replay_port: int, tmp_path: Path
) -> None:
    from locus_pipeline.live.onboard import collect_answers

    models = read_models_config(two_copies(tmp_path, replay_port))
    lines: list[str] = []
    _, full = collect_answers(
        home, OnboardConfig(endpoint="until-copy", budget=32, choice="adaptive"), models, lines.append
    )
    assert full["stopped_by"] == "budget" and len(full["rounds"]) == len(lines) == 4
    widths = [r["widest_points"] for r in full["rounds"]]
    until = widths[1] + 0.01
    first = next(i for i, w in enumerate(widths) if w < until)  # <= 1: the second round's widest is narrower
    home.live_answers_path("until-copy").unlink()  # the same questions asked again: the same answers, estimates
    answers, early = collect_answers(
        home, OnboardConfig(endpoint="until-copy", budget=32, choice="adaptive", until=until), models
    )
    assert early["stopped_by"] == "until" and len(answers) == full["rounds"][first]["answers"] < 32
    drop = lambda rounds: [{k: v for k, v in r.items() if k != "more_needed"} for r in rounds]  # noqa: E731
    assert drop(early["rounds"]) == drop(full["rounds"][: first + 1])  # the same rounds, the same estimates
    assert all(r["more_needed"] is None for r in full["rounds"])  # no target: nothing to count toward
    assert all(isinstance(r["more_needed"], int) for r in early["rounds"][:-1])  # answers the target still needs
    assert {e["benchmark"] for e in early["estimates"]} == {e["benchmark"] for e in full["estimates"]}
