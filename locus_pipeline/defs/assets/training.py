"""Training split + anchors, and the trained LOCUS checkpoint (tracked in MLflow)."""

import ast
import dataclasses
import inspect
import json
import textwrap
import types
import typing
from dataclasses import asdict

import dagster as dg
import pandas as pd
from pydantic import Field, create_model

from locus_model.data.matrix import evaluations_digest
from locus_model.evaluation.splits import model_split as split_models
from locus_model.evaluation.splits import query_split
from locus_model.markdown import escape_markdown
from locus_model.model_config import LocusConfig
from locus_model.training import TrainConfig
from locus_pipeline.defs.metadata import OWNERS, home_path, shown_whole, training_curve_png
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome
from locus_pipeline.tables import pool_evaluations, training_arrays
from locus_pipeline.tracking import Figures, TrainingRun


def checkpoint_figures(result) -> Figures:
    """(name, value, what it measures) of the saved checkpoint: the kept model's validation figures (after the
    predictor fine-tuning when it ran), then the selected epoch's (before it). The same names are the MLflow
    metrics ``selected/<name>`` and the Dagster floats (the Plots tab)."""
    epoch = result.best_metrics
    tuned = result.finetune
    out = [
        (
            "val_loss",
            tuned.get("val_loss_after", epoch.get("val_loss")),
            "the saved checkpoint's validation BCE"
            + (
                " after the predictor fine-tuning (every model embedded from all "
                "its train cells; the predictor alone, before the router's blend)"
                if tuned
                else " at the selected epoch"
            ),
        ),
        (
            "val_routing_acc",
            tuned.get("val_routing_acc", epoch.get("val_routing_acc")),
            "the saved checkpoint's validation routing accuracy: the mean score of the model it routes each validation "
            "query to" + (" (after the fine-tuning)" if tuned else ""),
        ),
        (
            "epoch_val_loss",
            epoch.get("val_loss"),
            f"validation BCE at the selected epoch {result.best_epoch}, "
            "before any fine-tuning (what selects the epoch)",
        ),
        ("epoch_val_routing_acc", epoch.get("val_routing_acc"), "validation routing accuracy at the selected epoch"),
        (
            "epoch_val_correctness_acc",
            epoch.get("val_correctness_acc"),
            "validation correctness accuracy (P > 0.5) at the selected epoch",
        ),
        ("epoch_train_loss", epoch.get("train_loss"), "training BCE (noisy queries) at the selected epoch"),
    ]
    latent = getattr(result, "latent", {})
    if latent:
        out += [
            (
                "latent_val_loss",
                latent.get("val_loss"),
                "validation BCE of the latent warm-up's predictor with "
                "its free model vectors (what the encoder is then trained to reproduce)",
            ),
            ("latent_noise", latent.get("noise"), "the query-noise ratio of the kept latent warm-up"),
        ]
    refit = getattr(result, "refit", {})
    if refit:
        out += [
            (
                "refit_val_loss_before",
                refit.get("val_loss_before"),
                "validation BCE of the selected epoch before "
                "the encoder's output refit (every model embedded from all its train cells)",
            ),
            (
                "refit_latent_r2",
                refit.get("latent_r2_after"),
                "share of the warm-up latents' variance the encoder's embeddings reproduce after the output refit",
            ),
            (
                "refit_alpha",
                refit.get("alpha"),
                "the kept ridge strength of the output refit (absent: the trained layer was kept)",
            ),
        ]
    if tuned:
        out += [
            (
                "finetune_val_loss_before",
                tuned.get("val_loss_before"),
                "validation BCE at the start of the fine-tuning",
            ),
            ("finetune_step", tuned.get("step"), "the kept step of the predictor fine-tuning"),
            ("finetune_noise", tuned.get("noise"), "the query-noise ratio of the kept fine-tuning"),
        ]
    return [(n, round(float(v), 4), why) for n, v, why in out if v is not None]


def stage_seconds_table(seconds: dict[str, float]) -> str:
    """Where the training's wall time went: one row per stage that ran (MLflow: seconds/<stage>)."""
    total = sum(seconds.values())
    return (
        "| stage | seconds | share |\n|---|---:|---:|\n"
        + "\n".join(
            f"| {stage} | {value:.1f} | {100 * value / max(total, 1e-9):.0f} % |" for stage, value in seconds.items()
        )
        + f"\n| total | {total:.1f} | |"
    )


def figures_metadata(figures: Figures) -> dict:
    """One float per figure (MLflow: selected/<name>), which the asset's Plots tab charts across materializations,
    and the figures as a table with what each measures."""
    table = "| figure | value | what it measures |\n|---|---|---|\n" + "\n".join(
        f"| `{name}` | {value:.4g} | {why} |" for name, value, why in figures
    )
    return {**{name: value for name, value, _ in figures}, "figures": dg.MetadataValue.md(table)}


class SplitConfig(dg.Config):
    budget: int = Field(
        default=512,
        description="Evaluations per model used for training: one shared random set of training queries (the anchors). "
        "Paper: 256 / 512 / 1024.",
    )
    seed: int = Field(default=0, description="Seed of the query split, the anchors and the held-out models.")
    test_fraction: float = Field(
        default=0.1,
        description="Held-out test queries (never used for embeddings) when the source has no split of its own.",
    )
    val_fraction: float = Field(default=0.1, description="Validation share of the remaining queries (early stopping).")
    holdout_models: float = Field(
        default=0.2,
        description="Share of models never trained on: embedded by one forward pass like an onboarded model, and "
        "reported apart by routing_evaluation. 0 = train on every model.",
    )


@dg.multi_asset(
    outs={
        "training_split": dg.AssetOut(
            kinds={"pandas"},
            group_name="training",
            owners=OWNERS,
            description="One row per query: query_id, split (train/val/test), anchor (one of the budget anchors).",
        ),
        "model_split": dg.AssetOut(
            kinds={"pandas"},
            group_name="training",
            owners=OWNERS,
            description="One row per model: model, group (in_training or held_out: never trained on).",
        ),
    },
)
def training_split(context: dg.AssetExecutionContext, config: SplitConfig, evaluation_table: pd.DataFrame):
    """The query split with its budget anchors, and the models held out of training."""
    queries = query_split(
        evaluation_table,
        budget=config.budget,
        seed=config.seed,
        test_fraction=config.test_fraction,
        val_fraction=config.val_fraction,
    )
    models = split_models(evaluation_table, holdout=config.holdout_models, seed=config.seed)
    yield dg.Output(
        queries,
        output_name="training_split",
        metadata={
            "queries_by_split": dg.MetadataValue.json(queries["split"].value_counts().to_dict()),
            "anchors": int(queries["anchor"].sum()),
        },
    )
    held = models.loc[models["group"] == "held_out", "model"].tolist()
    yield dg.Output(
        models,
        output_name="model_split",
        metadata={
            "in_training": int((models["group"] == "in_training").sum()),
            "held_out": len(held),
            "held_out_models": shown_whole(", ".join(held[:20]) + (" ..." if len(held) > 20 else "")),
        },
    )


def field_docs(cls: type) -> dict[str, str]:
    """A config dataclass's field docstrings (the string under each field, as Sphinx and pydantic's
    use_attribute_docstrings read them), each on one line: the one description of each field, shown by the
    launchpad."""
    definition = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(definition, ast.ClassDef), f"the source of {cls.__name__} is its class definition"
    body = definition.body
    return {
        node.target.id: " ".join(doc.value.value.split())
        for node, doc in zip(body, body[1:])
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(doc, ast.Expr)
        and isinstance(doc.value, ast.Constant)
        and isinstance(doc.value.value, str)
    }


def config_fields(cls: type, skip: tuple[str, ...] = ()) -> dict[str, typing.Any]:
    """A library config dataclass's fields as pydantic fields: same names, types and defaults (tuples as lists),
    described by their docstrings. Each value is (type, FieldInfo); typed Any, as create_model's
    ``**field_definitions`` are (a dict unpacked there is checked against its ``__config__``, ``__doc__``... too)."""
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    out: dict[str, typing.Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.name not in docs:
            raise TypeError(
                f"{cls.__name__}.{f.name} has no docstring, which the launchpad shows. How to fix: write "
                f"its description as a string on the line under the field in {cls.__module__}."
            )
        kind, default = hints[f.name], f.default
        if typing.get_origin(kind) is tuple:  # Dagster config has lists, not tuples
            assert isinstance(default, tuple), f"{cls.__name__}.{f.name}: a tuple field's default is a tuple"
            kind, default = types.GenericAlias(list, typing.get_args(kind)[0]), list(default)  # list[item type]
        out[f.name] = (kind, Field(default=default, description=docs[f.name]))
    return out


class _TrainingConfigBase(dg.Config):
    def to_library(self, query_dim: int) -> tuple[LocusConfig, TrainConfig]:
        """The library's configs, every field as set here (query_dim: the query encoder's width)."""
        values = self.model_dump()
        train = TrainConfig(**{f.name: values[f.name] for f in dataclasses.fields(TrainConfig)})
        model = LocusConfig(
            query_dim=query_dim,
            **{f.name: values[f.name] for f in dataclasses.fields(LocusConfig) if f.name != "query_dim"},
        )
        return model, train


_training_config = create_model(
    "TrainingConfig",
    __base__=_TrainingConfigBase,
    __doc__="LOCUS training: every field of the library's TrainConfig and LocusConfig (but query_dim), with their "
    "defaults (the best setting of the training sweep, bench/diag/README.md). The paper's setting "
    "is epochs=2500, patience=500, batch_models=128, noise_start=2.8, noise_end=1.4, "
    "noise_anneal_epochs=500, with all-mpnet-base-v2 encodings (see README).",
    # LocusConfig's query_dim is not configurable: it is the query encoder's width
    **config_fields(TrainConfig),
    **config_fields(LocusConfig, skip=("query_dim",)),
    # how this process runs, not what it trains: not part of the library's configs nor of the checkpoint
    threads=(
        int,
        Field(
            default=0,
            ge=0,
            description=(
                "torch CPU threads while training; 0 = the cores free when the training starts (locus_model.threads."
                "choose_threads: the cores less those other processes keep busy), recorded as the run's torch_threads. "
                "Threads beyond the free cores wait for a core (on a busy 2-core machine an epoch took 3.5x longer "
                "with 2)."
            ),
        ),
    ),
)
if typing.TYPE_CHECKING:

    class TrainingConfig(_TrainingConfigBase):
        """What a type checker sees of the model create_model builds above (its fields are made at run time from the
        library's dataclasses): the field the asset reads besides to_library's, with its default."""

        threads: int = 0

else:
    TrainingConfig = _training_config  # the class Dagster reads from the asset's signature


@dg.asset(
    kinds={"pytorch", "mlflow"}, group_name="training", pool="training", owners=OWNERS, tags={"layer": "training"}
)
def locus_checkpoint(
    context: dg.AssetExecutionContext,
    config: TrainingConfig,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    model_split: pd.DataFrame,
    home: LocusHome,
    mlflow: MlflowTracking,
) -> pd.DataFrame:
    """The trained set encoder + correctness predictor (trained on the in-training models only); one row:
    checkpoint_id, path (relative to LOCUS_HOME), encoder, MLflow run, metrics."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    import torch

    from locus_model.infer import inference_precision, resolve_device, torch_threads
    from locus_model.pool import embed_models
    from locus_model.threads import choose_threads
    from locus_model.training import train_locus

    in_training = set(model_split.loc[model_split["group"] == "in_training", "model"].astype(str))
    trained_on = evaluation_table[evaluation_table["model"].astype(str).isin(in_training)]
    arrays = training_arrays(trained_on, query_encodings, training_split)
    model_config, train_config = config.to_library(query_dim=arrays.encodings.shape[1])
    encoder = str(query_encodings["encoder"].iloc[0])
    # the runtime the training encodings came from: the pool and serving encode with the same one
    runtime = str(query_encodings["runtime"].iloc[0]) if "runtime" in query_encodings else "torch"
    digest, device = evaluations_digest(trained_on), str(resolve_device(train_config.device))
    threads = choose_threads(config.threads)  # the one threads rule: as asked, else the cores free now
    context.log.info(f"training on {threads.describe()}")
    with torch_threads(threads.threads), TrainingRun(mlflow, context.run_id, encoder=encoder) as tracked:
        torch_threads_used = torch.get_num_threads()
        tracked.log_params(
            model_config,
            train_config,
            evaluations_digest=digest,
            encoder_runtime=runtime,
            device=device,
            models=arrays.matrix.shape[0],
            held_out_models=int((model_split["group"] == "held_out").sum()),
            queries=arrays.matrix.shape[1],
            budget=int(training_split["anchor"].sum()),
            torch_threads=torch_threads_used,
        )
        result = train_locus(
            arrays.encodings,
            arrays.train_scores,
            arrays.val_scores,
            model_config=model_config,
            train_config=train_config,
            benchmarks=arrays.benchmarks,
            on_epoch=tracked.log_epoch,
            on_stage=context.log.info,
            progress=True,
        )
        router = result.router
        tracked.log_router(router)
        saved = home.save_checkpoint(
            lambda path: router.save(
                path,
                encoder=encoder,
                encoder_runtime=runtime,
                evaluations_digest=digest,
                best_epoch=result.best_epoch,
                train_config=asdict(train_config),
            )
        )
        curve = home.run_file(context.run_id, "training_curve.png")
        curve_md = training_curve_png(result.history, curve)
        figures = checkpoint_figures(result)  # the saved checkpoint's figures, the same in MLflow and in Dagster
        tracked.log_checkpoint(saved, curve, figures)
        tracked.log_stage_seconds(result.seconds)
        # the registered version as a pyfunc: the checkpoint with the training source's model embeddings
        tracked.register(
            saved,
            embed_models(
                router,
                pool_evaluations(evaluation_table, training_split),
                query_encodings,
                checkpoint=saved.checkpoint_id,
                source="training",
            ),
        )
    context.add_output_metadata(
        {
            **tracked.output_metadata(),
            "checkpoint": home_path(home, home.resolve(saved.stored)),
            "checkpoint_id": saved.checkpoint_id,
            "trained_on_models": arrays.matrix.shape[0],
            "best_epoch": result.best_epoch,
            "epochs_run": len(result.history),
            "device": device,
            "torch_threads": torch_threads_used,
            "torch_threads_chosen": shown_whole(threads.describe()),
            "stage_seconds": dg.MetadataValue.md(stage_seconds_table(result.seconds)),
            "router": shown_whole(
                router.describe()
            ),  # how P(correct) blends the predictor with the query groups' table
            "router_groups": dg.MetadataValue.md(", ".join(escape_markdown(n) for n in router.groups.names)),
            "inference_precision": inference_precision(device),  # of the pool's embeddings and of scoring (bf16/fp32)
            **figures_metadata(figures),
            "training_curve": dg.MetadataValue.md(curve_md),
        }
    )
    return pd.DataFrame(
        [
            {
                "checkpoint_id": saved.checkpoint_id,
                "path": saved.stored,
                "encoder": encoder,
                "evaluations_digest": digest,
                "mlflow_run_id": tracked.run_id,
                "model_version": tracked.version,
                "best_epoch": result.best_epoch,
                "best_metrics": json.dumps(result.best_metrics),
                "device": device,
                "kept_metrics": json.dumps({name: value for name, value, _ in figures}),
            }
        ]
    )
