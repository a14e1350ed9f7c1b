"""LOCUS_HOME: the one owner of every path, lock and read-modify-write of the pipeline's data.

Layout (every stored path is relative to the home, so a home can be copied or moved; the home is a local folder
or a URL such as ``s3://bucket/prefix``):

| where | what | module |
|---|---|---|
| ``warehouse/<asset>.parquet`` | asset outputs (``<asset>/<partition>.parquet`` for partitioned ones) | ``home`` |
| ``warehouse/model_embeddings.parquet`` | the pool, and its read-modify-write | ``pool`` |
| ``onboarded/<model_key>.parquet`` | every evaluation of an onboarded model so far (its store) | ``pool`` |
| ``onboarded/estimates/<key>.parquet`` | an onboarded model's capability estimates (the atlas shows them) | ``pool`` |
| ``checkpoints/locus-<id>.pt`` | LOCUS checkpoints, named by the sha256 prefix of their bytes | ``checkpoints`` |
| ``incoming/`` | the drop folder, with ``accepted/`` and ``rejected/`` | ``locus_pipeline.intake`` |
| ``encodings/<encoder>/`` | the query-encoding cache (per machine for a remote home) | ``home`` |
| ``reports/`` | analysis reports, ``atlas.html``; ``reports/runs/<run_id>/`` one run's files | ``home`` |
| ``mlflow/``, ``dagster/`` | a local home's MLflow database and artifacts, its Dagster instance | ``instance`` |
| ``ui.json`` | the UIs serving the home (``dagster_url``, ``mlflow_url``): make dev's ports, for the links | ``home`` |
| ``traffic/`` | `locus serve`'s decision and outcome logs (segments per writer), the learner's state, the claims of
  graded request ids (``claims/``), dropped outcome files' query texts (``queries/``), the keyed hashes' secret
  (``secret.key``) | ``traffic`` |
| ``.locks/`` | the locks (``pool``, ``model-<key>``, ``intake``): files, or lease objects in S3 | ``locks`` |

``files`` writes whole files atomically (rename locally, one upload in object storage). The library
(``locus_model``) never sees this layout: it gets frames, arrays and models from here.
"""

from locus_pipeline.storage.checkpoints import CheckpointRecord, PoolCheckpoint, SavedCheckpoint  # noqa: F401
from locus_pipeline.storage.files import (  # noqa: F401
    StorageError,
    checkpoint_id,
    read_parquet,
    sha256_file,
    write_bytes_atomic,
    write_parquet_atomic,
)
from locus_pipeline.storage.home import LocusHome  # noqa: F401
from locus_pipeline.storage.pool import POOL  # noqa: F401
