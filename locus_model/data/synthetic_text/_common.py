"""What every benchmark's text function draws with: a word from a list, k distinct ones, lettered options,
numeric options around an answer."""

from __future__ import annotations

import numpy as np


def pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def sample(rng: np.random.Generator, seq, k: int) -> list:
    return [seq[i] for i in rng.choice(len(seq), size=k, replace=False)]


def letters(options: list[str], style: str = "A.") -> str:
    labels = "ABCDE"
    if style == "a )":
        return " , ".join(f"{labels[i].lower()} ) {o}" for i, o in enumerate(options))
    return "\n".join(f"{labels[i]}{style[1:]} {o}" for i, o in enumerate(options))


def numeric_options(rng: np.random.Generator, answer: float, k: int) -> list[str]:
    vals = {round(answer, 2)}
    while len(vals) < k:
        vals.add(round(answer * float(rng.uniform(0.5, 1.6)) + float(rng.integers(-5, 6)), 2))
    out = [f"{v:g}" for v in vals]
    return [out[i] for i in rng.permutation(k)]
