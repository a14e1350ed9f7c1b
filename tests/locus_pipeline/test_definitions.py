"""The code location loads, without work at import time, and holds the required graph."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from locus_pipeline.definitions import defs

CHAIN = [
    "raw_evaluations",
    "evaluation_table",
    "query_encodings",
    "training_split",
    "locus_checkpoint",
    "model_embeddings",
    "routing_evaluation",
]


def test_definitions_load_with_the_required_chain() -> None:
    d = defs()
    graph = d.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert set(CHAIN) <= keys
    parents = {
        k.to_user_string(): {p.to_user_string() for p in graph.get(k).parent_keys} for k in graph.get_all_asset_keys()
    }
    edges = [
        ("raw_evaluations", "evaluation_table"),
        ("evaluation_table", "query_encodings"),
        ("evaluation_table", "training_split"),
        ("query_encodings", "locus_checkpoint"),
        ("training_split", "locus_checkpoint"),
        ("locus_checkpoint", "model_embeddings"),
        ("query_encodings", "routing_evaluation"),
        ("training_split", "routing_evaluation"),
    ]
    for upstream, downstream in edges:
        assert upstream in parents[downstream], (upstream, downstream)
    assert d.resolve_job_def("locus_job") is not None
    checks = {c.name for c in graph.asset_check_keys}
    assert {
        "evaluation_table_valid",
        "pool_embeddings_finite",
        "pool_embeddings_reproducible",
        "locus_beats_best_single",
    } <= checks


def test_training_is_in_a_pool_of_one() -> None:
    d = defs()
    assets = {a.key.to_user_string(): a for a in d.resolve_all_asset_specs()}
    node = d.resolve_assets_def("locus_checkpoint")
    assert node.op.pool == "training"
    assert "locus_checkpoint" in assets


def test_importing_the_definitions_is_cheap() -> None:
    # what makes a code-location load slow is the encoder stack and MLflow; none of it is imported at load
    # (no wall-clock bound: a test is no benchmark)
    heavy = ("sentence_transformers", "transformers", "onnxruntime", "mlflow")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, locus_pipeline.definitions as m; m.defs(); "
            f"print(*[name in sys.modules for name in {heavy!r}])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split()[-len(heavy) :] == ["False"] * len(heavy), out.stdout  # no model loading at import


def test_the_code_location_loads_without_torch() -> None:
    """Importing the code location and building its definitions imports no torch: the configs the launchpad shows
    (LocusConfig, TrainConfig) and the pool's schema live in torch-free modules; assets import torch in their body."""
    code = (
        "import sys, locus_pipeline.definitions as m; assert 'torch' not in sys.modules, 'import'; "
        "m.defs(); assert 'torch' not in sys.modules, 'defs()'"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def test_dg_cli_loads_the_project(tmp_path) -> None:
    import os
    from pathlib import Path

    from locus_pipeline.instance import prepare_dagster_home

    env = {**os.environ, "LOCUS_HOME": str(tmp_path), "DAGSTER_HOME": str(prepare_dagster_home(tmp_path))}
    dg_cli = Path(sys.executable).parent / "dg"
    out = subprocess.run(
        [str(dg_cli), "list", "defs", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for name in ("locus_checkpoint", "model_embeddings", "locus_job"):
        assert name in out.stdout


def test_training_config_defaults_are_the_library_defaults_and_every_field_reaches_the_library():
    from locus_model.model_config import LocusConfig
    from locus_model.training import TrainConfig
    from locus_pipeline.defs.assets.training import TrainingConfig

    model, train = TrainingConfig().to_library(query_dim=384)
    assert train == TrainConfig() and model == LocusConfig(query_dim=384)
    _, train = TrainingConfig(
        draws=2,
        ema_decay=0.0,
        epochs=7,
        noise_start=0.5,
        select_from_epoch=3,
        finetune_steps=40,
        finetune_patience=20,
        finetune_noise=[1.5, 2.5],
    ).to_library(384)
    assert (
        train.draws,
        train.ema_decay,
        train.epochs,
        train.noise_start,
        train.select_from_epoch,
        train.finetune_steps,
        train.finetune_patience,
        train.finetune_noise,
    ) == (2, 0.0, 7, 0.5, 3, 40, 20, (1.5, 2.5))


# A value other than the default for every field of the library's configs (a new field must be added here).
NOT_DEFAULT_TRAIN: dict[str, Any] = dict(
    epochs=7,
    max_steps=123,
    epoch_models=50,
    val_models=None,
    latent_steps=30,
    latent_noise=(0.5,),
    refit_alphas=(0.5, 2.0),
    batch_models=3,
    draws=2,
    enc_min=5,
    enc_max=40,
    dec_batch=33,
    val_set_max=None,
    lr_encoder=1e-3,
    lr_predictor=2e-3,
    weight_decay=0.01,
    noise_start=0.5,
    noise_end=0.25,
    noise_anneal_epochs=4,
    patience=9,
    select_from_epoch=3,
    seed=11,
    device="cpu",
    ema_decay=0.0,
    finetune_steps=40,
    finetune_patience=20,
    finetune_noise=(1.5, 2.5),
    predictor_step_cells=4096,
)
NOT_DEFAULT_MODEL: dict[str, Any] = dict(
    d=32, n_blocks=1, n_latents=8, n_heads=2, predictor_hidden=16, predictor_dropout=0.2
)


def test_every_field_of_the_library_configs_reaches_the_library_unchanged() -> None:
    import dataclasses

    from locus_model.model_config import LocusConfig
    from locus_model.training import TrainConfig
    from locus_pipeline.defs.assets.training import TrainingConfig

    assert set(NOT_DEFAULT_TRAIN) == {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(NOT_DEFAULT_MODEL) == {f.name for f in dataclasses.fields(LocusConfig)} - {"query_dim"}
    assert all(getattr(TrainConfig(), k) != v for k, v in NOT_DEFAULT_TRAIN.items())
    assert all(getattr(LocusConfig(), k) != v for k, v in NOT_DEFAULT_MODEL.items())
    # the library's fields, which a type checker does not see on TrainingConfig (create_model makes them)
    given: dict[str, Any] = {
        k: list(v) if isinstance(v, tuple) else v for k, v in {**NOT_DEFAULT_TRAIN, **NOT_DEFAULT_MODEL}.items()
    }
    model, train = TrainingConfig(**given).to_library(query_dim=96)
    assert train == TrainConfig(**NOT_DEFAULT_TRAIN)
    assert model == LocusConfig(query_dim=96, **NOT_DEFAULT_MODEL)
    described = {name: field.description for name, field in TrainingConfig.model_fields.items()}
    # threads: how the asset's process runs torch, not a training setting: it stays out of the library's configs
    assert set(described) == set(NOT_DEFAULT_TRAIN) | set(NOT_DEFAULT_MODEL) | {"threads"} and all(described.values())
    assert TrainingConfig(**given, threads=1).to_library(query_dim=96) == (model, train)


def test_the_launchpad_describes_each_field_by_its_docstring_in_the_library() -> None:
    """Each field of TrainConfig and LocusConfig has a docstring, and the launchpad's description is that docstring
    (one source: the library's dataclass)."""
    import dataclasses

    from locus_model.model_config import LocusConfig
    from locus_model.training import TrainConfig
    from locus_pipeline.defs.assets.training import TrainingConfig, config_fields, field_docs

    described = {name: field.description for name, field in TrainingConfig.model_fields.items()}
    for cls in (TrainConfig, LocusConfig):
        docs = field_docs(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        assert set(docs) == names and all(len(doc) > 10 for doc in docs.values()), names - set(docs)
        assert all(described[name] == doc for name, doc in docs.items() if name != "query_dim")
    refit_alphas = described["refit_alphas"]
    assert refit_alphas is not None
    assert refit_alphas.startswith("After the epochs (with the warm-up), the encoder's output layer")

    @dataclasses.dataclass(frozen=True)
    class Undocumented:
        a: int = 1
        """Documented."""
        b: int = 2

    with pytest.raises(TypeError, match="Undocumented.b has no docstring"):
        config_fields(Undocumented)


def test_the_readme_names_every_asset_as_it_is() -> None:
    """docs/pipeline.md's asset table names each asset by its key, and names no asset that does not exist."""
    import re
    from pathlib import Path

    from locus_pipeline.definitions import defs

    keys = {s.key.to_user_string() for s in defs().resolve_all_asset_specs()}
    readme = (Path(__file__).resolve().parents[2] / "docs" / "pipeline.md").read_text(encoding="utf-8")
    table = readme.split("| asset | what |", 1)[1].split("\n\n", 1)[0]
    named = set()
    for row in table.splitlines()[1:]:
        named |= {re.sub(r"\[key\]$", "", n) for n in re.findall(r"`([a-z_]+(?:\[key\])?)`", row.split(" | ")[0])}
    assert named == keys


def test_every_edge_of_the_readme_pipeline_graph_is_an_edge_of_the_asset_graph() -> None:
    """docs/pipeline.md's "The pipeline" block: each `a + b -> c, d -> e` says a and b are parents of c and d, c and d
    of e;
    every such edge is a dependency Dagster has, and every asset appears in the block."""
    import re
    from pathlib import Path

    from locus_pipeline.definitions import defs

    graph = defs().resolve_asset_graph()
    parents = {
        k.to_user_string(): {p.to_user_string() for p in graph.get(k).parent_keys} for k in graph.get_all_asset_keys()
    }
    readme = (Path(__file__).resolve().parents[2] / "docs" / "pipeline.md").read_text(encoding="utf-8")
    block = readme.split("## The pipeline", 1)[1].split("```", 2)[1]
    edges, seen = set(), set()
    for statement in re.split(r"[;\n]", block):
        stages = [
            {w for w in re.findall(r"[a-z_]+", re.sub(r"\([^)]*\)|\[[^]]*\]", "", s)) if w in parents}
            for s in statement.split("->")
        ]
        seen |= set().union(*stages)
        edges |= {(a, b) for left, right in zip(stages, stages[1:]) for a in left for b in right}
    assert len(edges) > 20
    assert not {(a, b) for a, b in edges if a not in parents[b]}, "README graph edges Dagster does not have"
    assert seen == set(parents)
