"""The tiny pipeline configuration the tests use."""

from __future__ import annotations

# Tiny and fast: the small synthetic pool (24 models, 600 queries; 5 models held out of training), the weight-free
# hashing encoder, a few epochs.
TINY_RUN_CONFIG = {
    "ops": {
        "raw_evaluations": {"config": {"source": "synthetic", "synthetic_size": "small"}},
        "query_encodings": {"config": {"encoder": "hashing-256"}},
        "training_split": {"config": {"budget": 128}},
        "locus_checkpoint": {
            "config": {
                "epochs": 3,
                "patience": 3,
                "enc_max": 64,
                "finetune_steps": 40,
                "latent_steps": 60,
                "threads": 1,
            }
        },
        "routing_evaluation": {"config": {"n_boot": 200}},
    }
}


def run_config_for(job_ops: set[str]) -> dict:
    return {"ops": {k: v for k, v in TINY_RUN_CONFIG["ops"].items() if k in job_ops}}


# The ops of pool_job (ingestion -> encodings -> training -> model_embeddings) that take config.
POOL_OPS = {"raw_evaluations", "query_encodings", "training_split", "locus_checkpoint"}
