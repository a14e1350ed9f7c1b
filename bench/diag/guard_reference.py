"""Does the product's guard lean toward the same model as the diag's? No training: per unit (draw, held-out choice,
fold) of bench.diag.group_smoothing, the model of highest standing as the router computes it (Router.standing: the
group profiles of fit_router's groups, weighted by their shares) against the model most accurate on its anchors
(the diag's ``guarded``). The guard's choice depends only on its reference and margin, so where the two agree in
every unit the product's guarded routing equals the diag's guard_<margin> figures on the same trainings.

    python -m bench.diag.guard_reference --suite mmlu --models 8 --questions 500 --draws 3
    python -m bench.diag.guard_reference --case ../shared/data/mmlu-pro/case-8x500.json --draws 1 --holdouts fraction
    python -m bench.diag.guard_reference --suite metabench --models all --questions 1075 --draws 1 --holdouts fraction
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.common import load_suite
from bench.diag.group_smoothing import add_unit_arguments, units_of
from locus_model.query_groups import fit_groups, group_profiles


def references(scores: np.ndarray, enc: np.ndarray, bench: np.ndarray, fold, trained: np.ndarray) -> tuple[int, int]:
    """(the router's reference, the anchors' most accurate) of one unit: the groups fitted as fit_router fits them
    (the in-training models' cells; the test queries' labels unread)."""
    budget, val = fold.budget_and_val(scores)
    labels = np.asarray(bench).astype(str).astype(object)
    labels[np.asarray(fold.test)] = ""
    groups = fit_groups(enc, budget[trained], val[trained], labels)
    standing = group_profiles(groups, enc, budget, labels).astype(np.float64) @ groups.shares()
    return int(np.argmax(standing)), int(np.argmax(np.nanmean(budget, axis=1)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_unit_arguments(p)
    args = p.parse_args(argv)
    matrix, _ = load_suite(args.suite)
    agree, units = 0, 0
    for d, holdout, fold, names, enc, scores, bench, trained, _ in units_of(args, matrix):
        router, anchors = references(scores, enc, bench, fold, trained)
        agree, units = agree + (router == anchors), units + 1
        print(
            f"draw {d} {holdout} fold {fold.index}: router {names[router]}, anchors {names[anchors]}"
            + ("" if router == anchors else "  <- differ"),
            flush=True,
        )
    print(f"the same reference in {agree} of {units} units")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
