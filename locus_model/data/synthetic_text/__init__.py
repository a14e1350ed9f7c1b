"""The query texts of the synthetic pool: a template and word lists per synthetic benchmark.

Nothing here is real: ten look-alikes of EmbedLLM's benchmarks ("synth-mathqa", "synth-gsm8k", ...), one text
function per benchmark that writes a question of a given subtopic from its vocabulary, so that a query's text
gives away its topic (and with it its skill loadings, locus_model.data.synthetic_skills). query_texts draws them,
distinct across the pool; the text functions are grouped by kind in maths, knowledge and reasoning.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from locus_model.data.synthetic_text._common import pick
from locus_model.data.synthetic_text.knowledge import gpqa, medmcqa, mmlu, truthfulqa
from locus_model.data.synthetic_text.maths import asdiv, gsm8k, mathqa
from locus_model.data.synthetic_text.reasoning import logiqa, piqa, socialiqa

_TEXT = {
    "synth-mathqa": mathqa,
    "synth-logiqa": logiqa,
    "synth-medmcqa": medmcqa,
    "synth-piqa": piqa,
    "synth-truthfulqa": truthfulqa,
    "synth-mmlu": mmlu,
    "synth-gsm8k": gsm8k,
    "synth-gpqa": gpqa,
    "synth-asdiv": asdiv,
    "synth-socialiqa": socialiqa,
}


def query_texts(
    rng: np.random.Generator, plan: Sequence[tuple[str, Sequence[str], int]]
) -> tuple[list[str], list[str], list[str]]:
    """(benchmark, subtopic, text) of every query, in plan order: per (benchmark, its subtopics, n) n queries,
    each of a subtopic drawn from rng; a text already drawn is drawn again (texts are unique across the pool)."""
    bench, sub, texts = [], [], []
    seen: set[str] = set()
    for name, subtopics, n in plan:
        subs = list(subtopics)
        for _ in range(n):
            st = pick(rng, subs)
            for _attempt in range(200):
                t = _TEXT[name](rng, st)
                if t not in seen:
                    break
            else:
                raise RuntimeError(
                    f"synthetic text generator for {name}/{st} ran out of distinct texts after "
                    f"{len(seen)} queries. How to fix: add vocabulary to locus_model/data/synthetic_text/"
                )
            seen.add(t)
            bench.append(name)
            sub.append(st)
            texts.append(t)
    return bench, sub, texts
