"""The MLflow side of training a LOCUS checkpoint (one tracked run per ``locus_checkpoint`` materialization) and of
onboarding a model (``log_onboarding_estimates``: one run per ``onboarded_model_embedding`` materialization of an
onboarded model, holding its capability estimates).

``TrainingRun`` wraps the training in a run of the ``MlflowTracking`` resource's experiment and keeps the run's
bookkeeping in one place, so that the asset reads: start the tracked run, train, save the checkpoint through the
home, log and register it here. What the run holds:

- name ``locus-<Dagster run id[:8]>``; tags ``dagster.run_id``, ``dagster.run_url``, ``dagster.asset``, ``encoder``,
  ``checkpoint_id``, and a description (``mlflow.note.content``) that links the Dagster run;
- params ``model.<field>`` and ``train.<field>`` (the library's configs), ``encoder``, ``seed`` and what the caller
  passes (the evaluations' digest, the encoder runtime, the device, counts);
- metrics ``epoch/<name>`` per epoch and ``selected/<name>`` of the saved checkpoint;
- artifacts ``checkpoint/locus-<id>.pt`` and ``plots/training_curve.png``, and the pyfunc (``pyfunc.py``), registered
  as a new version of the registered model with the alias ``current``.
Nothing here imports mlflow at module load (the code location imports this module).
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager, Mapping, Protocol

import dagster as dg
import pandas as pd

if TYPE_CHECKING:
    from locus_pipeline.newcomers import NewcomerEstimates
    from locus_pipeline.storage.checkpoints import SavedCheckpoint


class Tracking(Protocol):
    """What a run logs through: the tracking resource (locus_pipeline.defs.resources.MlflowTracking) or a stand-in."""

    def start_run(self, run_name: str, tags: Mapping[str, str]) -> ContextManager[Any]: ...

    def dagster_run_url(self, run_id: str) -> str: ...


class TrainingTracking(Tracking, Protocol):
    """What a training run logs through besides: the model registry and the MLflow UI's links."""

    @property
    def registered_model(self) -> str: ...

    def register_version(
        self, logged: Any, *, run_id: str, alias: str, description: str, tags: dict[str, str], version_description: str
    ) -> str: ...

    def run_url(self, experiment_id: str, run_id: str) -> str: ...

    def experiment_url(self, experiment_id: str) -> str: ...


ASSET = "locus_checkpoint"
CURRENT_ALIAS = "current"  # the registered model's newest version: models:/locus@current
REGISTERED_MODEL_DESCRIPTION = (
    "LOCUS (arXiv 2601.21082): the set encoder that turns a model's evaluations into a model embedding, and the "
    "correctness predictor P(correct | model embedding, query encoding). Each version is one `locus_checkpoint` "
    "materialization (tags: checkpoint_id, encoder, dagster.run_url); the alias `current` is the newest. "
    "`mlflow.pyfunc.load_model('models:/locus@current').predict(pd.DataFrame({'query': [...]}))` routes queries "
    "(add a `model` column for P(correct) of (query, model) pairs; locus_pipeline/pyfunc.py); the run's "
    "`checkpoint/` holds the `.pt` for `locus_model.model.load_checkpoint`."
)

Figures = list[tuple[str, float, str]]  # (name, value, what it measures) of the saved checkpoint


class TrainingRun:
    """One training run tracked in MLflow, as a context manager around the training::

    with TrainingRun(mlflow, context.run_id, encoder=encoder) as tracked:
        tracked.log_params(model_config, train_config, device=device, ...)
        result = train_locus(..., on_epoch=tracked.log_epoch)
        saved = home.save_checkpoint(...)
        tracked.log_checkpoint(saved, curve_png, figures)
        tracked.register(saved, embeddings)
    context.add_output_metadata(tracked.output_metadata())
    """

    def __init__(self, tracking: TrainingTracking, dagster_run_id: str, *, encoder: str) -> None:
        self.tracking, self.dagster_run_id, self.encoder = tracking, dagster_run_id, encoder
        self.dagster_run_url = tracking.dagster_run_url(dagster_run_id)
        self.run: Any = None  # the MLflow run, from entering on
        self.version: str | None = None  # the registered model version, from register() on
        self._stack = ExitStack()

    @property
    def _dagster_link(self) -> str:
        return f"[{self.dagster_run_id[:8]}]({self.dagster_run_url})"

    @property
    def _dagster_tags(self) -> dict[str, str]:
        return {"dagster.run_id": self.dagster_run_id, "dagster.run_url": self.dagster_run_url}

    def __enter__(self) -> TrainingRun:
        tags = {
            **self._dagster_tags,
            "dagster.asset": ASSET,
            "encoder": self.encoder,
            # the run's description (markdown, rendered with links on the run page)
            "mlflow.note.content": f"LOCUS checkpoint trained by Dagster run {self._dagster_link} (asset `{ASSET}`).",
        }
        self.run = self._stack.enter_context(
            self.tracking.start_run(run_name=f"locus-{self.dagster_run_id[:8]}", tags=tags)
        )
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        return self._stack.__exit__(*exc)

    @property
    def run_id(self) -> str:
        return self.run.info.run_id

    def log_params(self, model_config: Any, train_config: Any, **inputs: Any) -> None:
        """The library's configs (``model.<field>``, ``train.<field>``), the encoder, the seed, and ``inputs``."""
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        import mlflow

        mlflow.log_params(
            {
                **{f"model.{k}": v for k, v in asdict(model_config).items()},
                **{f"train.{k}": v for k, v in asdict(train_config).items()},
                "encoder": self.encoder,
                "seed": train_config.seed,
                **inputs,
            }
        )

    def log_epoch(self, row: dict) -> None:
        """``train_locus``'s ``on_epoch``: one epoch's figures as ``epoch/<name>`` at step = epoch. The prefixes
        "epoch/" and "selected/" are sections of MLflow's run page, in name order: the per-epoch curves come before
        the single values of the kept checkpoint (drawn as bars)."""
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        import mlflow

        mlflow.log_metrics(
            {f"epoch/{k}": float(v) for k, v in row.items() if k != "epoch" and v is not None}, step=int(row["epoch"])
        )

    def log_checkpoint(self, saved: SavedCheckpoint, curve: Path, figures: Figures) -> None:
        """The saved checkpoint: its figures (``selected/<name>``), its id (tag), its file (``checkpoint/``) and the
        training curve (``plots/``)."""
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        import mlflow

        mlflow.log_metrics({f"selected/{name}": value for name, value, _ in figures})
        mlflow.set_tag("checkpoint_id", saved.checkpoint_id)
        mlflow.log_artifact(str(saved.local), artifact_path="checkpoint")
        mlflow.log_artifact(str(curve), artifact_path="plots")

    def log_stage_seconds(self, seconds: dict[str, float]) -> None:
        """The wall seconds of each training stage that ran (``TrainResult.seconds``) as ``seconds/<stage>``: where a
        training's time went (the latent warm-up, the epochs, the output refit, the fine-tuning, the router)."""
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        import mlflow

        mlflow.log_metrics({f"seconds/{stage}": float(value) for stage, value in seconds.items()})

    def log_router(self, router) -> None:
        """The trained router (locus_model.router.Router): its blend weights as
        ``router/predictor_weight``, ``router/groups_weight``, ``router/bias``, its groups as ``router/groups``
        (a parameter), its description as the tag ``router``."""
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        import mlflow

        mlflow.log_metrics(
            {
                "router/predictor_weight": router.blend.predictor,
                "router/groups_weight": router.blend.groups,
                "router/bias": router.blend.bias,
            }
        )
        mlflow.log_params({"router/groups": ", ".join(router.groups.names)[:6000]})
        mlflow.set_tag("router", router.describe())

    def register(self, saved: SavedCheckpoint, embeddings: pd.DataFrame) -> str:
        """The checkpoint with ``embeddings`` (the model embeddings it made) logged as a pyfunc and registered as a
        new version (alias ``current``); returns the version number."""
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        from locus_pipeline.pyfunc import log_pyfunc

        with tempfile.TemporaryDirectory() as staging_dir:
            logged = log_pyfunc(saved.local, embeddings, staging_dir)
            self.version = self.tracking.register_version(
                logged,
                run_id=self.run_id,
                alias=CURRENT_ALIAS,
                description=REGISTERED_MODEL_DESCRIPTION,
                tags={"checkpoint_id": saved.checkpoint_id, "encoder": self.encoder, **self._dagster_tags},
                version_description=f"Checkpoint `{saved.checkpoint_id}` ({self.encoder}), trained by Dagster run "
                f"{self._dagster_link}.",
            )
        return self.version

    def output_metadata(self) -> dict[str, Any]:
        """The asset's links to the run and the experiment, and the registered version."""
        experiment = self.run.info.experiment_id
        return {
            "mlflow_run": dg.MetadataValue.url(self.tracking.run_url(experiment, self.run_id)),
            "registered_model_version": f"{self.tracking.registered_model} v{self.version} (alias {CURRENT_ALIAS})",
            "mlflow_experiment": dg.MetadataValue.url(self.tracking.experiment_url(experiment)),
        }


# ---------------------------------------------------------------------------------------------- onboarding

ONBOARDING_ASSET = "onboarded_model_embedding"
_UNSAFE = re.compile(r"[^\w.\- ]+")  # MLflow takes letters, digits, _ - . space (and / : , which would nest a key)


def mlflow_key(name: str) -> str:
    """A name (a benchmark's) as one segment of an MLflow metric key: what MLflow refuses or reads as a path
    ('/', ':', '..', a lone '.') becomes '_'; a name so changed gets 8 hex digits of its sha1, so that two names
    never share a key ("law" -> "law", "a/b" -> "a_b-<sha1[:8]>")."""
    key = re.sub(r"\.{2,}", "_", _UNSAFE.sub("_", name)).strip(". ")[:100] or "_"
    return key if key == name else f"{key}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def log_onboarding_estimates(
    tracking: Tracking, dagster_run_id: str, model: str, checkpoint_id: str, estimates: NewcomerEstimates
) -> tuple[str, str]:
    """One MLflow run (name ``estimates <model>``, tags ``locus/kind`` = onboarding, ``locus/model``,
    ``dagster.run_id``, ``dagster.run_url``, ``dagster.asset``, ``checkpoint_id``, ``answers_like_most``) with what
    the onboarding partition's metadata shows: per benchmark ``capability/<benchmark>/estimate``, ``/lo``, ``/hi``
    (the 90% interval), ``/observed`` and ``/n`` (where it answered; benchmark names through ``mlflow_key``),
    ``widest_interval``; the param ``answers_like`` (the models it answers like, most alike first); the tables
    ``estimates/capability_estimates.json`` and ``estimates/answers_like.json``. Returns (experiment id, run id)."""
    import mlflow  # why: seconds to import; the code location imports this module, only a logging run needs it

    cap, like = estimates.capability, estimates.answers_like
    metrics = {"widest_interval": float((cap["hi"] - cap["lo"]).max())}
    for row in cap.itertuples(index=False):
        key = f"capability/{mlflow_key(str(row.benchmark))}"
        metrics.update({f"{key}/estimate": float(row.estimate), f"{key}/lo": float(row.lo), f"{key}/hi": float(row.hi)})
        if row.n:
            metrics.update({f"{key}/observed": float(row.observed), f"{key}/n": float(row.n)})
    alike = [str(m) for m in like["model"]]
    tags = {
        "locus/kind": "onboarding",
        "locus/model": model,
        "dagster.run_id": dagster_run_id,
        "dagster.run_url": tracking.dagster_run_url(dagster_run_id),
        "dagster.asset": ONBOARDING_ASSET,
        "checkpoint_id": checkpoint_id,
        "answers_like_most": alike[0] if alike else "",
    }
    with tracking.start_run(f"estimates {model}", tags) as run:  # a live onboarding logs its answers apart
        mlflow.log_metrics(metrics)
        mlflow.log_param("answers_like", ", ".join(alike)[:6000])
        mlflow.log_table(cap.assign(benchmark=cap["benchmark"].astype(str)), "estimates/capability_estimates.json")
        mlflow.log_table(like.assign(model=like["model"].astype(str)), "estimates/answers_like.json")
        return run.info.experiment_id, run.info.run_id
