"""The registered model as an MLflow pyfunc: ``mlflow.pyfunc.load_model("models:/locus@current")`` loads the
checkpoint with the model embeddings it made at training time, and scores queries.

    predict(DataFrame{query})          -> query, model (the routed one: best P(correct)), p_correct
    predict(DataFrame{query, model})   -> query, model, p_correct of that (query, model) pair

The models are those of the training source (trained on and held out), embedded by the checkpoint when it was
trained; the live pool (onboarded models included) is what `locus serve` routes over. Queries are encoded with the
checkpoint's own sentence encoder (offline). Needs this project installed where it is loaded.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import mlflow.pyfunc
import numpy as np
import pandas as pd
import torch
from mlflow.models import ModelSignature
from mlflow.pyfunc import PythonModel
from mlflow.types import ColSpec, Schema

from locus_model.data.encoding import encode_queries
from locus_model.router import Router
from locus_model.routing import RoutingPolicy, route_many

ARTIFACT_PATH = "locus_router"  # the logged model's name in the run


class LocusPyfunc(PythonModel):
    """P(correct) of (query, model) pairs, or each query's routed model."""

    def load_context(self, context) -> None:
        router, extra = Router.load(context.artifacts["checkpoint"])
        self.encoder = str(extra["encoder"])
        self.scorer = router.scorer(pd.read_parquet(context.artifacts["embeddings"]))
        self.names = list(self.scorer.names)

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        frame = pd.DataFrame(model_input)
        if "query" not in frame.columns:
            raise ValueError(f"the input has columns {list(frame.columns)}; it needs 'query' (and optionally 'model')")
        queries = frame["query"].astype(str).tolist()
        phi = encode_queries(queries, encoder=self.encoder, progress=False)  # (Q, D)
        probs = self.scorer.proba(phi)  # (M, Q)
        cols = np.arange(len(queries))
        if "model" in frame.columns:
            index = {n: i for i, n in enumerate(self.names)}
            unknown = sorted(set(frame["model"].astype(str)) - set(index))
            if unknown:
                raise ValueError(
                    f"unknown model(s) {unknown[:5]}; this version knows {len(self.names)}: {self.names[:5]} ..."
                )
            rows = np.array([index[m] for m in frame["model"].astype(str)])
        else:
            # routed as locus serve routes at its defaults: the default policy, no costs known here
            rows = route_many(probs, np.zeros(len(probs)), RoutingPolicy(), standing=self.scorer.standing)
        return pd.DataFrame(
            {
                "query": queries,
                "model": [self.names[i] for i in rows],
                "p_correct": probs[rows, cols].astype(np.float64),
            }
        )


def log_pyfunc(checkpoint_path, embeddings: pd.DataFrame, staging_dir):
    """Log the pyfunc to the active MLflow run, with the checkpoint file and the model embeddings as artifacts;
    returns its ModelInfo (``model_uri``, ``model_id``: the registered version's source)."""
    table = Path(staging_dir) / "model_embeddings.parquet"
    embeddings.to_parquet(table, index=False)
    signature = ModelSignature(
        inputs=Schema([ColSpec("string", "query"), ColSpec("string", "model", required=False)]),
        outputs=Schema([ColSpec("string", "query"), ColSpec("string", "model"), ColSpec("double", "p_correct")]),
    )
    requirements = [
        f"mlflow=={mlflow.__version__}",
        f"torch=={torch.__version__}",
        f"pandas=={pd.__version__}",
        f"numpy=={np.__version__}",
    ]  # given, not inferred (inference imports and runs the model)
    with warnings.catch_warnings():  # no input example on purpose: validating it would load the sentence encoder
        warnings.filterwarnings("ignore", message=".*input example was not provided")
        return mlflow.pyfunc.log_model(
            name=ARTIFACT_PATH,
            python_model=LocusPyfunc(),
            pip_requirements=requirements,
            artifacts={"checkpoint": str(checkpoint_path), "embeddings": str(table)},
            signature=signature,
        )
