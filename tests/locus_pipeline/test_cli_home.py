"""The `locus` commands that look into LOCUS_HOME: `locus evaluate` reads the home's query-encoding cache first,
`locus mlflow-uri` says where the home's tracking database is (or why there is none)."""

from __future__ import annotations

import json

import pandas as pd

from locus_model.data.encoding import encode_queries_with_summary
from locus_pipeline.cli import main
from tests.locus_model.tables import write_table


def test_evaluate_reuses_the_homes_cached_query_encodings(tmp_path, monkeypatch, capsys):
    home, table = tmp_path / "home", write_table(tmp_path / "evals.csv")
    texts = pd.read_csv(table).drop_duplicates("query_id")["query"].tolist()
    encode_queries_with_summary(
        texts, encoder="hashing-256", cache_dir=home / "encodings" / "hashing-256", progress=False
    )
    monkeypatch.setenv("LOCUS_HOME", str(home))
    monkeypatch.setenv("LOCUS_CACHE_DIR", str(tmp_path / "user-cache"))  # empty: what is found comes from the home
    out = tmp_path / "results.json"
    assert (
        main(
            [
                "evaluate",
                "--evaluations",
                str(table),
                "--encoder",
                "hashing-256",
                "--budget",
                "16",
                "--folds",
                "2",
                "--methods",
                "knn,best_single",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    settings = json.loads(out.read_text())["settings"]
    assert settings["queries_encoded"] == 0 and settings["queries_from_cache"] == len(texts) == 50
    assert not (tmp_path / "user-cache" / "encodings").exists()
    printed = capsys.readouterr().out
    assert "units: percent" in printed and "Brier x100" in printed


def test_mlflow_uri_names_the_homes_database_or_says_how_to_get_one(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["mlflow-uri", "--home", str(tmp_path / "empty")]) != 0
    assert "no MLflow database" in capsys.readouterr().err
    (tmp_path / "home" / "mlflow").mkdir(parents=True)
    (tmp_path / "home" / "mlflow" / "mlflow.db").write_bytes(b"")
    assert main(["mlflow-uri", "--home", str(tmp_path / "home")]) == 0
    assert capsys.readouterr().out.strip() == f"sqlite:///{tmp_path / 'home' / 'mlflow' / 'mlflow.db'}"
