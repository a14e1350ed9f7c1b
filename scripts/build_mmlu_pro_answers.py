"""Build data/mmlu-pro/answers.parquet (model, query_id, answer, pred) from a snapshot of TIGER-AI-Lab/MMLU-Pro.

    python scripts/build_mmlu_pro_answers.py <git dir of the MMLU-Pro snapshot> [--out data/mmlu-pro/answers.parquet]

Reads eval_results/model_outputs_<model>_5shots.zip for the models of data/mmlu-pro/models.csv one at a time (git
show, unzip in memory), keeps each record's gold ``answer`` and recorded ``pred`` (null when the harness extracted
none), and prints how often locus_model.data.mmlu_pro_bank.extract_answer, applied to the recorded generation,
gives the recorded pred, on the first --check records of each file (the check of data/mmlu-pro/README.md; the
scorer's last-letter rule is quadratic in a generation's length, so all 347,215 take long).
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pandas as pd

from locus_model.data.mmlu_pro import QUERY_ID_PREFIX, _parse_record
from locus_model.data.mmlu_pro_bank import extract_answer

ROOT = Path(__file__).resolve().parent.parent


def records_of(git_dir: str, model: str) -> list:
    blob = subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"HEAD:eval_results/model_outputs_{model}_5shots.zip"],
        check=True,
        capture_output=True,
    ).stdout
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".json") and not n.startswith("__MACOSX")]
        return json.loads(archive.read(name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("git_dir")
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "mmlu-pro" / "answers.parquet")
    parser.add_argument("--check", type=int, default=300, help="records per file whose extraction is checked")
    args = parser.parse_args(argv)
    models = pd.read_csv(ROOT / "data" / "mmlu-pro" / "models.csv")["model"].tolist()
    rows: list[tuple[str, str, str, str | None]] = []  # (model, query_id, gold answer, the recorded prediction)
    agreement: Counter[bool] = Counter()  # does our extraction agree with the published prediction?
    for model in models:
        seen = set()
        for n, entry in enumerate(records_of(args.git_dir, model), start=1):
            if isinstance(entry, str):  # summary keys leaked into a published file (data/mmlu-pro/README.md)
                continue
            qid, _, _, answer, pred = _parse_record(entry, Path(model), n)
            if qid in seen:
                continue
            seen.add(qid)
            rows.append((model, f"{QUERY_ID_PREFIX}{qid}", answer, pred))
            generation = entry.get("model_outputs", entry.get("generated_text"))
            if isinstance(generation, str) and n <= args.check:
                agreement[extract_answer(generation)[0] == pred] += 1
        print(f"{model}: {len(seen)} questions", file=sys.stderr)
    table = pd.DataFrame(rows, columns=["model", "query_id", "answer", "pred"])
    table = (
        table.sort_values(["model", "query_id"])
        .reset_index(drop=True)
        .astype({"model": "category", "answer": "category", "pred": "category"})
    )
    table.to_parquet(args.out, compression="zstd", index=False)
    total = sum(agreement.values())
    print(
        f"{len(table)} rows -> {args.out}; extract_answer(generation) == recorded pred on "
        f"{agreement[True]}/{total} records ({agreement[True] / max(total, 1):.4%})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
