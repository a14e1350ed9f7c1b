"""The protocol's folds of a case bench_case ran, with each fold's kept router: what issue 57's newcomer diagnostics
(newcomer_offsets, newcomer_blend) re-score.

Rebuilds what `locus evaluate` built on the case subset (bench_case wrote it: evaluations.parquet): the default
encoder's encodings, five query folds (seed 0, 10% validation, the budget's anchors), 0.2 of the models held out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from locus_model.data.encoding import encode_queries
from locus_model.data.long_format import read_evaluations
from locus_model.data.matrix import EvaluationMatrix
from locus_model.evaluation.methods import fit_and_predict
from locus_model.evaluation.splits import choose_held_out, kfold_splits
from locus_model.router import Router
from locus_model.stats.bootstrap import bootstrap_draws


@dataclass
class CaseFolds:
    matrix: EvaluationMatrix
    encodings: np.ndarray  # (Q, D)
    scores: np.ndarray  # (M, Q), NaN = no cell
    trained: np.ndarray  # model rows LOCUS was trained on
    held: np.ndarray  # held-out (onboarded) model rows
    benchmarks: np.ndarray  # (Q,) str
    splits: list

    def kept_router(self, fits: Path, fold) -> Router | None:
        """The fold's router bench_case's --fit-cache kept, None (said) when there is none."""
        found = sorted(fits.glob(f"locus_f{fold.index}_*.pt"))
        if not found:
            print(f"fold {fold.index}: no kept LOCUS in {fits}; skipped")
        return Router.load(found[-1])[0] if found else None

    def predict(self, name: str, fold, router: Router | None = None, **kwargs) -> np.ndarray:
        """(M, Q_test) P(correct) of a method on the fold, as the protocol fits it (LOCUS: the given router)."""
        return fit_and_predict(
            name=name,
            seed=fold.index,
            scores=self.scores,
            encodings=self.encodings,
            fold=fold,
            trained=self.trained,
            held=self.held,
            router=router,
            benchmarks=self.benchmarks if name == "locus" else None,
            **kwargs,
        )[0]


def case_folds(case: Path, budget: int = 256) -> CaseFolds:
    matrix = EvaluationMatrix.from_table(read_evaluations(case / "evaluations.parquet")[0])
    held = choose_held_out(len(matrix.models), 0.2, 0)
    print("held out:", [matrix.models[i] for i in held])
    return CaseFolds(
        matrix,
        np.asarray(encode_queries(matrix.queries, progress=False), np.float32),
        matrix.scores.astype(np.float32),
        np.setdiff1d(np.arange(len(matrix.models)), held),
        held,
        np.asarray(matrix.benchmarks).astype(str),
        kfold_splits(len(matrix.query_ids), folds=5, budget=budget, seed=0, val_fraction=0.1),
    )


def print_against(
    probs: dict[str, list[np.ndarray]],
    labels: list[np.ndarray],
    rows: np.ndarray,
    group: str,
    references: tuple[str, ...] = ("best_single",),
) -> None:
    """Each variant's routing among ``rows`` and its difference from each reference (fold means, the protocol's
    fold-stratified paired 95% interval)."""
    resampled = bootstrap_draws(
        {m: [p[rows] for p in ps] for m, ps in probs.items()}, [y[rows] for y in labels], n_boot=2000, seed=0
    )
    for name in [n for n in probs if n != "best_single"]:
        parts = []
        for ref in (r for r in references if r != name):
            c = resampled.compare(name, ref)["routing_acc"]
            parts.append(f"minus {ref} {100 * c['diff']:+.1f} [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]")
        print(
            f"[{group}] {name:<14} routing {100 * resampled.point[name]['routing_acc']:5.1f}  "
            + "  ".join(parts)
            + f"  ({len(labels)} folds)"
        )
