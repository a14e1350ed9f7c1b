"""``locus onboard --endpoint NAME``: onboard a model behind an OpenAI-compatible endpoint (its models config entry)
by asking it MMLU-Pro questions in rounds (``choice``: one seeded random order, the default, or adaptive: where the
per-benchmark estimates' intervals narrow most, locus_model.estimates.questions; bench/README.md "Adaptive onboarding"),
then onboarding the graded answers the way a dropped evaluation file is onboarded.

1. The candidate questions are the MMLU-Pro bank's (data/mmlu-pro) that the home's training source holds (their
   encodings are in query_encodings).
2. Rounds of ``concurrency`` questions: each asked through ``locus serve``'s upstream client
   (live/asking.ask_one over serve/upstream.forward) with the entry's timeout and ``retries`` retries, graded
   (mmlu_pro_bank.grade_answer), and appended to the home's answer log (``live/<model_key>.jsonl``) as it arrives, so a
   crash or Ctrl-C resumes without asking again. After each round the per-benchmark capability estimates are recomputed
   (live/rounds.py) and a progress line reported. It stops at ``budget`` answers, before ``max_cost`` USD (prices from
   the models config), or when every estimate's 90% interval is narrower than ``until`` points. A round whose every call
   fails ends the run with the last error and no pool change.
3. The graded answers become an evaluation file (model, query_id, query, benchmark, score) handed to the drop
   folder's intake through its front door (locus_pipeline.intake.hand_in: written to incoming/ as any drop, taken
   in once settled, the outcome told back), then onboarded by ``onboarding_job`` (one forward pass, the pool
   materialized with its check, the model's neighbours): the caller's ``publish`` starts that run (``locus onboard``:
   in this process), else a running Dagster's drop-folder sensor requests it.
4. An MLflow run logs the prompts, answers, grades and cost.

The options are declared once, in locus_pipeline/live/options.py.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Callable

import httpx
import numpy as np
import pandas as pd

from locus_model.data.contract import safe_model_key
from locus_model.data.mmlu_pro_bank import grade_answer, question_prompt, read_answer_bank
from locus_model.data.query_encodings import encoding_matrix
from locus_model.estimates.questions import DEFAULT_CHOICE
from locus_model.onboarding import nearest_models
from locus_model.routing.costs import CostTable, cost_table
from locus_pipeline.home_location import REPO_ROOT
from locus_pipeline.intake import DropFolder, Manifest, hand_in
from locus_pipeline.live.asking import ask_one, call_cost
from locus_pipeline.live.options import OnboardConfig, OnboardError
from locus_pipeline.live.rounds import Rounds
from locus_pipeline.serve.config import ModelsConfig, Upstream
from locus_pipeline.tracking import Tracking

if TYPE_CHECKING:
    from locus_pipeline.storage import LocusHome

MMLU_PRO = REPO_ROOT / "data" / "mmlu-pro"  # the question bank: its questions, answers and grading
Publish = Callable[[Manifest], "str | None"]  # starts the onboarding run of an accepted file; returns its id


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
    run_id: str | None = None  # the onboarding run this process started (None: the drop-folder sensor's)
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
        raise OnboardError(
            f"the home {home.location} holds no MMLU-Pro question (its training source is another "
            "benchmark). How to fix: build the home from the mmlu_pro source (make demo)"
        )
    questions = questions.reset_index(drop=True)
    return questions, encoding_matrix(encodings, questions["query_id"].tolist())


def _endpoint(config: OnboardConfig, models: ModelsConfig) -> tuple[Upstream, CostTable | None]:
    """The endpoint's models config entry and its prices in USD (None when it has none); --max-cost needs them."""
    if config.endpoint not in models.upstreams:
        raise OnboardError(
            f"no endpoint {config.endpoint!r} in the models config (entries with a base_url: "
            f"{sorted(models.upstreams) or 'none'}). How to fix: add "
            f"'{config.endpoint}: {{base_url: http://host:port/v1, model: <upstream name>}}' under models:"
        )
    costs = None
    if config.endpoint in models.costs and models.costs[config.endpoint]:
        table = cost_table([config.endpoint], {config.endpoint: models.costs[config.endpoint]})
        costs = table if table.basis == "usd" else None
    if config.max_cost is not None and costs is None:
        raise OnboardError(
            f"--max-cost needs a price for {config.endpoint!r}: add cost_per_query or "
            "price_input_per_mtok / price_output_per_mtok to its models config entry"
        )
    return models.upstreams[config.endpoint], costs


@dataclass
class _Collection:
    """One session of asking an endpoint: the answers so far (the home's log, resumed), the money spent, the calls
    refused, and why it stopped."""

    home: LocusHome
    config: OnboardConfig
    models: ModelsConfig
    upstream: Upstream
    costs: CostTable | None
    questions: pd.DataFrame
    rounds: Rounds
    key: str  # the endpoint's model key: its answer log
    done: list[dict]
    spent: float
    progress: Callable[[str], None] | None = None
    failed: dict[str, str] = field(default_factory=dict)
    stopped_by: str = "budget"
    asked_now: int = 0

    def __post_init__(self) -> None:
        self.index = {q: i for i, q in enumerate(self.questions["query_id"])}

    def next_round(self) -> np.ndarray | None:
        """The questions of the next round (rows of ``questions``), or None with ``stopped_by`` set: the budget, the
        estimates narrow enough (until), no question left, or the money (each call priced at its prompt and the
        expected answer length)."""
        config = self.config
        if len(self.done) >= config.budget:
            self.stopped_by = "budget"
            return None
        if self.rounds.done():
            self.stopped_by = "until"
            return None
        asked = np.array([self.index[r["query_id"]] for r in self.done], dtype=np.int64)
        skip = np.array([self.index[q] for q in self.failed], dtype=np.int64)
        pick = self.rounds.next(asked, skip, min(config.concurrency, config.budget - len(self.done)))
        if len(pick) == 0:
            self.stopped_by = "questions"
            return None
        if config.max_cost is not None:
            rows = self.questions.iloc[pick]
            each = [
                call_cost(self.costs, question_prompt(q, b), "", {"completion_tokens": self.models.output_tokens})
                for q, b in zip(rows["query"], rows["benchmark"])
            ]
            pick = pick[self.spent + np.cumsum(each) <= config.max_cost]
            if len(pick) == 0:
                self.stopped_by = "max_cost"
                return None
        return pick

    async def ask(self, client: httpx.AsyncClient, i: int) -> bool:
        """Question ``i`` asked, graded and appended to the home's answer log; False when the endpoint refused it."""
        row = self.questions.iloc[int(i)]
        prompt = question_prompt(row["query"], row["benchmark"])
        started = time.monotonic()
        answer, billed = await ask_one(client, self.config.endpoint, self.upstream, prompt, self.config.retries)
        if billed:  # answered, then failed: counted at what the budget priced it (never less)
            self.spent += billed * call_cost(self.costs, prompt, "", {"completion_tokens": self.models.output_tokens})
        if answer.text is None:  # one line per refused answer, the reason in it
            self.failed[row["query_id"]] = answer.error
            if self.progress is not None:
                self.progress(f"refused answer to {row['query_id']}: {answer.error}")
            return False
        text, usage = answer.text, answer.usage
        grade = grade_answer(text, row["answer"], int(row["n_options"]))
        cost = call_cost(self.costs, prompt, text, usage)
        record = {
            "query_id": row["query_id"],
            "benchmark": row["benchmark"],
            "prompt": prompt,
            "answer": text,
            "letter": grade.letter,
            "gold": row["answer"],
            "score": grade.score,
            "reason": grade.reason,
            "cost_usd": cost,
            "seconds": round(time.monotonic() - started, 3),
            "usage": usage,
            "at": time.time(),
        }
        self.home.append_live_answer(self.key, record)  # before anything else: a crash after this never re-asks
        self.done.append(record)
        self.spent += cost
        self.asked_now += 1
        return True

    async def run(self) -> None:
        """Rounds until next_round stops; a round whose every call fails ends the session with the last error."""
        config = self.config
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=config.concurrency)) as client:
            while (pick := self.next_round()) is not None:
                results = await asyncio.gather(*(self.ask(client, i) for i in pick))
                if not any(results):
                    last = self.failed[self.questions["query_id"].iloc[int(pick[-1])]]
                    raise OnboardError(
                        f"every call of a round to {config.endpoint!r} ({self.upstream.base_url}) failed "
                        f"({len(pick)} calls, {config.retries} retries each); last error: {last}. "
                        "Nothing was added to the pool. How to fix: check the endpoint's base_url, "
                        "model and API key (api_key_env) in the models config"
                    )
                self.rounds.estimate(self.done)
                line = self.rounds.progress(len(self.done), self.spent)  # recorded in rounds.lines whoever listens
                if self.progress is not None:
                    self.progress(line)


def collect_answers(
    home, config: OnboardConfig, models: ModelsConfig, progress=None, *, data: str = str(MMLU_PRO)
) -> tuple[pd.DataFrame, dict]:
    """Ask, grade and log in rounds until the budget, the money or the questions run out or the estimates are narrow
    enough (``until``); ``progress(line)`` gets one line per round; ``data``: the MMLU-Pro bank. Returns (the log as a
    table, facts)."""
    upstream, costs = _endpoint(config, models)
    key = safe_model_key(config.endpoint)
    questions, _ = _candidates(home, read_answer_bank(data))
    checkpoint = home.pool_checkpoint(home.read_pool())
    log = home.read_live_answers(key)
    known = set(questions["query_id"])
    done = [r for r in log if r["query_id"] in known]
    resumed = len(done)
    assert config.choice is not None  # OnboardConfig fills in the library's default when made
    rounds = Rounds(home, questions, choice=config.choice, until=config.until)
    if done:  # resumed: the next round starts from what was answered
        rounds.estimate(done)
    spent = sum(float(r.get("cost_usd", 0.0)) for r in log)
    session = _Collection(home, config, models, upstream, costs, questions, rounds, key, done, spent, progress)
    asyncio.run(session.run())
    if not done:
        raise OnboardError(f"no answers from {config.endpoint!r}; nothing was added to the pool")
    facts = {
        "resumed": resumed,
        "asked_now": session.asked_now,
        "failed_calls": len(session.failed),
        "cost_usd": session.spent,
        "stopped_by": session.stopped_by,
        "candidates": len(questions),
        "checkpoint_id": checkpoint.checkpoint_id,
        "choice": config.choice,
        "until": config.until,
        "rounds": rounds.lines,
        "estimates": rounds.table_rows().round(4).to_dict("records"),
    }
    answers = pd.DataFrame(done)
    answers["query"] = answers["query_id"].map(dict(zip(questions["query_id"], questions["query"])))
    return answers, facts


# ---------------------------------------------------------------------------------------------- onboarding


def evaluation_rows(model: str, answers: pd.DataFrame) -> pd.DataFrame:
    """The graded answers as the evaluation contract's rows (model, query_id, query, benchmark, score)."""
    return pd.DataFrame(
        {
            "model": model,
            "query_id": answers["query_id"],
            "query": answers["query"],
            "benchmark": answers["benchmark"],
            "score": answers["score"].astype(float),
        }
    )


def onboard_rows(home, model: str, rows: pd.DataFrame, *, publish: Publish | None = None) -> tuple[str, str | None]:
    """Hand the rows to the drop folder's intake as any drop (locus_pipeline.intake.hand_in) and be told the outcome;
    returns (the file as stored in accepted/, the onboarding run id or None). ``publish`` starts the run of the
    accepted file under the intake lock (``locus onboard``: in this process); without it, or when a running sensor's
    tick took the file in, the drop-folder sensor requests the run. Answers onboarded before (the same bytes): the
    earlier file, no run. A rejection raises an OnboardError with its reason."""
    folder = DropFolder(home)
    name = f"live-{safe_model_key(model)}-{len(rows)}.csv"
    handed = hand_in(folder, name, rows.to_csv(index=False), publish=publish)
    if handed.rejection is not None:
        raise OnboardError(
            f"the drop folder's intake did not accept the answers of {model!r}: "
            f"{handed.rejection.summary()} (see incoming/{handed.rejection.reason_file})"
        )
    assert handed.manifest is not None  # taken in: accepted, or a duplicate of an earlier file
    return str(folder.accepted / handed.manifest.stem), handed.published


def log_to_mlflow(
    tracking: Tracking,
    config: OnboardConfig,
    answers: pd.DataFrame,
    facts: dict,
    result: OnboardResult,
    dagster_run_id: str | None = None,
) -> str:
    """The onboarding's MLflow run: prompts, answers, grades, cost, and (as training's run does) the Dagster run it
    belongs to, ``dagster.run_id`` and ``dagster.run_url`` (the onboarding run, else the live_onboarding_job run)."""
    # why: mlflow loads only when the run is logged (not with --no-mlflow)
    import mlflow

    assert config.choice is not None  # OnboardConfig fills in the library's default when made
    tags = {
        "locus/kind": "live-onboarding",
        "locus/model": config.endpoint,
        "locus/choice": config.choice,
        "locus/stopped_by": result.stopped_by,
    }
    linked = result.run_id or dagster_run_id
    if linked:
        tags.update({"dagster.run_id": linked, "dagster.run_url": tracking.dagster_run_url(linked)})
    with tracking.start_run(f"onboard {config.endpoint}", tags) as run:
        mlflow.log_params(asdict(config))
        mlflow.log_metrics(
            {
                "answers": result.answers,
                "accuracy": result.accuracy,
                "cost_usd": result.cost_usd,
                "failed_calls": result.failed_calls,
                "asked_now": result.asked_now,
                "seconds": result.seconds,
            }
        )
        mlflow.log_table(
            answers[["query_id", "benchmark", "prompt", "answer", "letter", "gold", "score", "reason", "cost_usd"]],
            "answers.json",
        )
        mlflow.log_dict({**facts, "neighbours": result.neighbours, "run_id": result.run_id}, "onboarding.json")
        return run.info.run_id


def per_category(answers: pd.DataFrame, z: float = 1.96) -> pd.DataFrame:
    """Per MMLU-Pro category: answers, accuracy and its 95% Wilson interval (few answers per category: wide)."""
    g = answers.groupby("benchmark")["score"].agg(answers="size", accuracy="mean")
    n, p = g["answers"].to_numpy(float), g["accuracy"].to_numpy(float)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return g.assign(low=centre - half, high=centre + half).round(3)


def onboard_endpoint(
    home,
    config: OnboardConfig,
    models: ModelsConfig,
    *,
    publish: Publish | None = None,
    tracking: Tracking | None = None,
    with_answers: bool = False,
    dagster_run_id: str | None = None,
    progress=None,
    data: str = str(MMLU_PRO),
):
    """Ask, grade, onboard and log one endpoint (module docstring); returns the OnboardResult (and the answers
    table with ``with_answers``). ``publish``: starts the onboarding run (onboard_rows). ``tracking``: where the
    MLflow run is logged (None: not logged). ``dagster_run_id``: the Dagster run asking (live_onboarding_job), linked
    from the MLflow run when no onboarding run was started here. ``progress(line)``: one line per round."""
    start = time.monotonic()
    assert config.choice is not None  # OnboardConfig fills in the library's default when made
    answers, facts = collect_answers(home, config, models, progress, data=data)
    rows = evaluation_rows(config.endpoint, answers)
    stored, run_id = onboard_rows(home, config.endpoint, rows, publish=publish)
    neighbours = []
    if run_id is not None:
        neighbours = nearest_models(home.read_pool(), config.endpoint, 5)["model"].astype(str).tolist()
    result = OnboardResult(
        model=config.endpoint,
        answers=len(answers),
        asked_now=facts["asked_now"],
        resumed=facts["resumed"],
        failed_calls=facts["failed_calls"],
        accuracy=float(answers["score"].mean()),
        cost_usd=facts["cost_usd"],
        stopped_by=facts["stopped_by"],
        seconds=round(time.monotonic() - start, 2),
        neighbours=neighbours,
        run_id=run_id,
        evaluation_file=home.relative(stored),
        choice=config.choice,
        rounds=facts["rounds"],
        estimates=facts["estimates"],
    )
    if tracking is not None:
        result.mlflow_run_id = log_to_mlflow(tracking, config, answers, facts, result, dagster_run_id)
    return (result, answers) if with_answers else result
