"""``locus onboard --endpoint NAME``: onboard a model behind an OpenAI-compatible endpoint (its models config entry)
by asking it MMLU-Pro questions in rounds (``choice``: one seeded random order, the default, or adaptive: where the
per-benchmark estimates' intervals narrow most, locus_model.adaptive; bench/README.md "Adaptive onboarding"), then
onboarding the graded answers the way a dropped evaluation file is onboarded.

1. The candidate questions are the MMLU-Pro bank's (data/mmlu-pro) that the home's training source holds (their
   encodings are in query_encodings).
2. Rounds of ``concurrency`` questions: each asked through ``locus serve``'s upstream client
   (live/asking.ask_one over serve/upstream.forward) with the entry's timeout and ``retries`` retries, graded (mmlu_pro_bank.grade_answer),
   and appended to the home's answer log (``live/<model_key>.jsonl``) as it arrives, so a crash or Ctrl-C resumes
   without asking again. After each round the per-benchmark capability estimates are recomputed (live/rounds.py)
   and a progress line reported. It stops at ``budget`` answers, before ``max_cost`` USD (prices from the models
   config), or when every estimate's 90% interval is narrower than ``until`` points. A round whose every call fails
   ends the run with the last error and no pool change.
3. The graded answers become an evaluation file (model, query_id, query, benchmark, score) taken in by the drop
   folder's intake (intake_file) and onboarded by ``onboarding_job`` (one forward pass, the pool materialized with
   its check, the model's neighbours): in this process by default, or by a running Dagster's drop-folder sensor
   (``via_sensor``: the file is written to incoming/).
4. An MLflow run logs the prompts, answers, grades and cost.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import dagster as dg
import httpx
import numpy as np
import pandas as pd

from locus_model.adaptive import CHOICES, DEFAULT_CHOICE
from locus_model.data.contract import safe_model_key
from locus_model.data.mmlu_pro_bank import grade_answer, question_prompt, read_answer_bank
from locus_model.data.query_encodings import encoding_matrix
from locus_model.onboarding import nearest_models
from locus_model.routing.costs import cost_table
from locus_pipeline.definitions import defs as load
from locus_pipeline.defs.resources import MlflowTracking, resources_for
from locus_pipeline.defs.sensors import run_requests_for
from locus_pipeline.home_location import REPO_ROOT
from locus_pipeline.instance import prepare_dagster_home
from locus_pipeline.intake import SETTLE_SECONDS, DropFolder, intake_tick
from locus_pipeline.intake.folder import write_text_atomic
from locus_pipeline.live.asking import ask_one, call_cost
from locus_pipeline.live.rounds import Rounds
from locus_pipeline.runlog import QUIET_RUN
from locus_pipeline.serve.config import ModelsConfig

MMLU_PRO = REPO_ROOT / "data" / "mmlu-pro"
SENSOR_NAME = "onboarding_drop_folder"  # its run keys, set on the run launched here, so the sensor never repeats it


class OnboardError(RuntimeError):
    """A live onboarding that cannot go on; the message says why and how to fix it. The pool is unchanged."""


@dataclass(frozen=True)
class OnboardConfig:
    endpoint: str  # the models config entry (its name becomes the pool model's name)
    budget: int = 64  # answers to collect (calls that failed do not count)
    max_cost: float | None = None  # USD: no call is started that could take the spend above it
    concurrency: int = 8  # calls in flight at once; also the questions chosen per round
    retries: int = 2  # retries of a failed call (timeout, connection, 5xx / 429), with backoff
    via_sensor: bool = False  # True: leave the file in incoming/ for a running Dagster's drop-folder sensor
    choice: str = DEFAULT_CHOICE  # random | adaptive: how the next round's questions are chosen
    until: float | None = None  # points: stop once every benchmark's 90% interval is narrower (None: at the budget)
    data: str = str(MMLU_PRO)  # the MMLU-Pro bank

    def __post_init__(self) -> None:
        if self.budget < 1 or self.concurrency < 1 or self.retries < 0:
            raise OnboardError("budget and concurrency must be >= 1 and retries >= 0")
        if self.max_cost is not None and not self.max_cost >= 0:
            raise OnboardError(f"max_cost {self.max_cost!r} must be a number >= 0 (USD)")
        if self.choice not in CHOICES:
            raise OnboardError(f"choice {self.choice!r}: use one of {', '.join(CHOICES)}")
        if self.until is not None and not self.until > 0:
            raise OnboardError(f"until {self.until!r} must be a width in points > 0 (e.g. 10)")


@dataclass
class OnboardResult:
    model: str
    answers: int  # answers in the log (this run's and a resumed run's)
    asked_now: int  # calls answered by this run
    resumed: int  # answers found in the log at the start
    failed_calls: int
    accuracy: float
    cost_usd: float
    stopped_by: str  # budget | max_cost | questions | until
    seconds: float
    neighbours: list[str] = field(default_factory=list)
    run_id: str | None = None  # the onboarding run (None with via_sensor)
    mlflow_run_id: str | None = None
    evaluation_file: str = ""
    choice: str = DEFAULT_CHOICE
    rounds: list[dict] = field(default_factory=list)  # per round: answers, cost_usd, widest_benchmark, widest_points
    estimates: list[dict] = field(default_factory=list)  # the last round's: benchmark, estimate, lo, hi, observed, n


# ---------------------------------------------------------------------------------------------- asking


def _candidates(home, bank) -> tuple[pd.DataFrame, np.ndarray]:
    """The bank's questions that the home's query_encodings hold, and their (Q, D) encodings."""
    encodings = home.read_table("query_encodings")
    questions = bank.questions[bank.questions["query_id"].isin(set(encodings["query_id"].astype(str)))]
    if questions.empty:
        raise OnboardError(f"the home {home.location} holds no MMLU-Pro question (its training source is another "
                           "benchmark). How to fix: build the home from the mmlu_pro source (make demo)")
    questions = questions.reset_index(drop=True)
    return questions, encoding_matrix(encodings, questions["query_id"].tolist())


def collect_answers(home, config: OnboardConfig, models: ModelsConfig, progress=None) -> tuple[pd.DataFrame, dict]:
    """Ask, grade and log in rounds until the budget, the money or the questions run out or the estimates are narrow
    enough (``until``); ``progress(line)`` gets one line per round. Returns (the log as a table, facts)."""
    if config.endpoint not in models.upstreams:
        raise OnboardError(f"no endpoint {config.endpoint!r} in the models config (entries with a base_url: "
                           f"{sorted(models.upstreams) or 'none'}). How to fix: add "
                           f"'{config.endpoint}: {{base_url: http://host:port/v1, model: <upstream name>}}' under models:")
    upstream = models.upstreams[config.endpoint]
    costs = None
    if config.endpoint in models.costs and models.costs[config.endpoint]:
        table = cost_table([config.endpoint], {config.endpoint: models.costs[config.endpoint]})
        costs = table if table.basis == "usd" else None
    if config.max_cost is not None and costs is None:
        raise OnboardError(f"--max-cost needs a price for {config.endpoint!r}: add cost_per_query or "
                           "price_input_per_mtok / price_output_per_mtok to its models config entry")
    key = safe_model_key(config.endpoint)
    bank = read_answer_bank(config.data)
    questions, _ = _candidates(home, bank)
    checkpoint = home.pool_checkpoint(home.read_pool())

    log = home.read_live_answers(key)
    index = {q: i for i, q in enumerate(questions["query_id"])}
    done = [r for r in log if r["query_id"] in index]
    resumed = len(done)
    spent = sum(float(r.get("cost_usd", 0.0)) for r in log)
    failed: dict[str, str] = {}
    stopped_by = "budget"
    asked_now = 0
    rounds = Rounds(home, questions, checkpoint.model, choice=config.choice, until=config.until)
    if done:  # resumed: the next round starts from what was answered
        rounds.estimate(done)

    async def run() -> None:
        nonlocal spent, stopped_by, asked_now
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=config.concurrency)) as client:
            while len(done) < config.budget:
                if rounds.done():
                    stopped_by = "until"
                    return
                asked = np.array([index[r["query_id"]] for r in done], dtype=np.int64)
                skip = np.array([index[q] for q in failed], dtype=np.int64)
                k = min(config.concurrency, config.budget - len(done))
                pick = rounds.next(asked, skip, k)
                if len(pick) == 0:
                    stopped_by = "questions"
                    return
                if config.max_cost is not None:  # each call priced at its prompt and the expected answer length
                    rows = questions.iloc[pick]
                    each = [call_cost(costs, question_prompt(q, b), "", {"completion_tokens": models.output_tokens})
                            for q, b in zip(rows["query"], rows["benchmark"])]
                    pick = pick[spent + np.cumsum(each) <= config.max_cost]
                    if len(pick) == 0:
                        stopped_by = "max_cost"
                        return

                async def one(i: int) -> bool:
                    nonlocal spent, asked_now
                    row = questions.iloc[int(i)]
                    prompt = question_prompt(row["query"], row["benchmark"])
                    started = time.monotonic()
                    answer, billed = await ask_one(client, config.endpoint, upstream, prompt, config.retries)
                    if billed:  # answered, then failed: counted at what the budget priced it (never less)
                        spent += billed * call_cost(costs, prompt, "", {"completion_tokens": models.output_tokens})
                    if answer.text is None:  # one line per refused answer, the reason in it
                        failed[row["query_id"]] = answer.error
                        if progress is not None:
                            progress(f"refused answer to {row['query_id']}: {answer.error}")
                        return False
                    text, usage = answer.text, answer.usage
                    grade = grade_answer(text, row["answer"], int(row["n_options"]))
                    cost = call_cost(costs, prompt, text, usage)
                    record = {"query_id": row["query_id"], "benchmark": row["benchmark"], "prompt": prompt,
                              "answer": text, "letter": grade.letter, "gold": row["answer"], "score": grade.score,
                              "reason": grade.reason, "cost_usd": cost, "seconds": round(time.monotonic() - started, 3),
                              "usage": usage, "at": time.time()}
                    home.append_live_answer(key, record)  # before anything else: a crash after this never re-asks
                    done.append(record)
                    spent += cost
                    asked_now += 1
                    return True

                results = await asyncio.gather(*(one(i) for i in pick))
                if not any(results):
                    last = failed[questions["query_id"].iloc[int(pick[-1])]]
                    raise OnboardError(f"every call of a round to {config.endpoint!r} ({upstream.base_url}) failed "
                                       f"({len(pick)} calls, {config.retries} retries each); last error: {last}. "
                                       "Nothing was added to the pool. How to fix: check the endpoint's base_url, "
                                       "model and API key (api_key_env) in the models config")
                rounds.estimate(done)
                line = rounds.progress(len(done), spent)  # recorded in rounds.lines whoever listens
                if progress is not None:
                    progress(line)

    asyncio.run(run())
    if not done:
        raise OnboardError(f"no answers from {config.endpoint!r}; nothing was added to the pool")
    facts = {"resumed": resumed, "asked_now": asked_now, "failed_calls": len(failed), "cost_usd": spent,
             "stopped_by": stopped_by, "candidates": len(questions), "checkpoint_id": checkpoint.checkpoint_id,
             "choice": config.choice, "until": config.until, "rounds": rounds.lines,
             "estimates": rounds.table_rows().round(4).to_dict("records")}
    answers = pd.DataFrame(done)
    answers["query"] = answers["query_id"].map(dict(zip(questions["query_id"], questions["query"])))
    return answers, facts


# ---------------------------------------------------------------------------------------------- onboarding


def evaluation_rows(model: str, answers: pd.DataFrame) -> pd.DataFrame:
    """The graded answers as the evaluation contract's rows (model, query_id, query, benchmark, score)."""
    return pd.DataFrame({"model": model, "query_id": answers["query_id"], "query": answers["query"],
                         "benchmark": answers["benchmark"], "score": answers["score"].astype(float)})


def onboard_rows(home, model: str, rows: pd.DataFrame, *, via_sensor: bool) -> tuple[str, str | None]:
    """Hand the rows to the drop folder; returns (the file as stored, the onboarding run id or None).

    ``via_sensor``: the file is left in incoming/ for a running Dagster's drop-folder sensor. Else this process
    publishes an intake tick itself and runs the model's onboarding, the run keyed as the sensor keys it
    (``<sha256>:<model key>``) and started while it holds the intake lock: a sensor tick never publishes while
    another process holds the lock and skips a run key that has a run, so one file gets one run, whoever
    publishes it."""
    folder = DropFolder(home).ensure()
    name = f"live-{safe_model_key(model)}-{len(rows)}.csv"
    dropped = folder.incoming / name
    if via_sensor:
        write_text_atomic(dropped, rows.to_csv(index=False))
        return str(dropped), None
    sha = hashlib.sha256(rows.to_csv(index=False).encode("utf-8")).hexdigest()
    ran: dict = {}

    def drop() -> None:  # under the intake lock: no sensor tick takes it in before this process publishes it
        write_text_atomic(dropped, rows.to_csv(index=False))
        old = time.time() - SETTLE_SECONDS  # complete (written, then renamed): ready for this tick
        os.utime(dropped, (old, old))

    def publish(outcome) -> None:  # under the intake lock
        manifest = next((m for m in outcome.manifests if m.sha256 == sha), None)
        rejection = next((r for r in outcome.rejections if r.file == name), None)
        if manifest is None:
            raise OnboardError(f"the drop folder's intake did not accept the answers of {model!r}: "
                               f"{rejection.summary() if rejection else outcome.message()}")
        if manifest.duplicate_of is not None:
            ran["stored"] = folder.accepted / manifest.stem  # the same answers were onboarded before
            return
        ran["stored"] = folder.accepted / manifest.stem
        ran["run_id"] = run_onboarding(home, manifest)

    intake_tick(folder, wait=True, prepare=drop, publish=publish)
    if "stored" not in ran:
        raise OnboardError(f"the answers of {model!r} were not taken in (still in {dropped})")
    return str(ran["stored"]), ran.get("run_id")


def run_onboarding(home, manifest) -> str | None:
    """The onboarding run of an accepted file (its models' partitions, as the sensor requests it), in this process
    on the home's Dagster instance (no environment variable set; $DAGSTER_HOME's instance when it is set), unless
    a run with its run key exists (the sensor published it first): then that run's id."""
    dagster_home = os.environ.get("DAGSTER_HOME") or str(prepare_dagster_home(Path(home.local_path)))
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        requests, new = run_requests_for(manifest, instance.get_dynamic_partitions("onboarded_models"))
        (request,) = requests  # the answers of one model: one partition
        earlier = instance.get_runs(dg.RunsFilter(tags={"dagster/run_key": request.run_key}), limit=1)
        if earlier:
            return earlier[0].run_id
        instance.add_dynamic_partitions("onboarded_models", new)
        tags = {**request.tags, "dagster/run_key": request.run_key, "dagster/sensor_name": SENSOR_NAME,
                "locus/trigger": "locus onboard"}
        run = load().resolve_job_def("onboarding_job").execute_in_process(
            instance=instance, run_config={**request.run_config, **QUIET_RUN}, tags=tags,  # the range is in the tags
            resources=resources_for(home), raise_on_error=False)
    if not run.success:
        raise OnboardError(f"the onboarding run {run.run_id} of {manifest.original_name!r} failed; see its logs in Dagster")
    return run.run_id


def log_to_mlflow(home, config: OnboardConfig, answers: pd.DataFrame, facts: dict, result: OnboardResult,
                  dagster_run_id: str | None = None) -> str:
    """The onboarding's MLflow run: prompts, answers, grades, cost, and (as training's run does) the Dagster run it
    belongs to, ``dagster.run_id`` and ``dagster.run_url`` (the onboarding run, else the live_onboarding_job run)."""
    # why: mlflow loads only when the run is logged (not with --no-mlflow)
    import mlflow

    tracking = MlflowTracking(home=home)
    tags = {"locus/kind": "live-onboarding", "locus/model": config.endpoint, "locus/choice": config.choice,
            "locus/stopped_by": result.stopped_by}
    linked = result.run_id or dagster_run_id
    if linked:
        tags.update({"dagster.run_id": linked, "dagster.run_url": tracking.dagster_run_url(linked)})
    with tracking.start_run(f"onboard {config.endpoint}", tags) as run:
        mlflow.log_params({k: v for k, v in asdict(config).items() if k != "data"})
        mlflow.log_metrics({"answers": result.answers, "accuracy": result.accuracy, "cost_usd": result.cost_usd,
                            "failed_calls": result.failed_calls, "asked_now": result.asked_now,
                            "seconds": result.seconds})
        mlflow.log_table(answers[["query_id", "benchmark", "prompt", "answer", "letter", "gold", "score", "reason",
                                  "cost_usd"]], "answers.json")
        mlflow.log_dict({**facts, "neighbours": result.neighbours, "run_id": result.run_id}, "onboarding.json")
        return run.info.run_id


def per_category(answers: pd.DataFrame, z: float = 1.96) -> pd.DataFrame:
    """Per MMLU-Pro category: answers, accuracy and its 95% Wilson interval (few answers per category: wide)."""
    g = answers.groupby("benchmark")["score"].agg(answers="size", accuracy="mean")
    n, p = g["answers"].to_numpy(float), g["accuracy"].to_numpy(float)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return g.assign(low=centre - half, high=centre + half).round(3)


def onboard_endpoint(home, config: OnboardConfig, models: ModelsConfig, *, mlflow_log: bool = True,
                     with_answers: bool = False, dagster_run_id: str | None = None, progress=None):
    """Ask, grade, onboard and log one endpoint (module docstring); returns the OnboardResult (and the answers
    table with ``with_answers``). ``dagster_run_id``: the Dagster run asking (live_onboarding_job), linked from the
    MLflow run when this process runs no onboarding run of its own. ``progress(line)``: one line per round."""
    start = time.monotonic()
    answers, facts = collect_answers(home, config, models, progress)
    rows = evaluation_rows(config.endpoint, answers)
    stored, run_id = onboard_rows(home, config.endpoint, rows, via_sensor=config.via_sensor)
    neighbours = []
    if run_id is not None:
        neighbours = nearest_models(home.read_pool(), config.endpoint, 5)["model"].astype(str).tolist()
    result = OnboardResult(model=config.endpoint, answers=len(answers), asked_now=facts["asked_now"],
                           resumed=facts["resumed"], failed_calls=facts["failed_calls"],
                           accuracy=float(answers["score"].mean()), cost_usd=facts["cost_usd"],
                           stopped_by=facts["stopped_by"], seconds=round(time.monotonic() - start, 2),
                           neighbours=neighbours, run_id=run_id, evaluation_file=home.relative(stored),
                           choice=config.choice, rounds=facts["rounds"], estimates=facts["estimates"])
    if mlflow_log:
        result.mlflow_run_id = log_to_mlflow(home, config, answers, facts, result, dagster_run_id)
    return (result, answers) if with_answers else result
