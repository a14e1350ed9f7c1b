"""The latent skill model of the SYNTHETIC pool, and the pool drawn from it in memory (make_synthetic_tables).

Nothing here is real: the models ("synth-..."), the benchmarks ("synth-gsm8k", ...) and the query texts
are generated. Correctness comes from a multidimensional IRT model (see data/SYNTHETIC.md):

    theta_m = family base + size effect * log2(params_b / 7) + finetune boost (+ small noise)   # (K,)
    P(model m answers query q) = c_q + (1 - c_q) * sigmoid(a_q . theta_m - b_q)

with K latent skills, a_q the query's skill loadings (set by its benchmark and subtopic, i.e. by the topic
of its text), b_q its difficulty and c_q the guessing floor of a multiple-choice question (0 otherwise).
Families, specialists (math / code / medical finetunes) and re-uploads (models sharing one skill vector)
exist by construction, so later analyses (clustering, near-duplicate detection, routing) can be checked against the
truth returned beside the tables. The query texts come from locus_model.data.synthetic_text; the files are
written by locus_model.data.synthetic.

    evaluations, models, truth = make_synthetic_tables("small", seed=0)       # in memory
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from locus_model.data.synthetic_text import query_texts

SKILLS = ("general", "arithmetic", "logic", "knowledge", "medicine", "commonsense", "truthfulness")  # K = 7
# EmbedLLM's query split: 29,673 / 3,000 / 3,000 of 35,673 queries.
SPLIT_FRACTIONS = {"train": 29_673 / 35_673, "val": 3_000 / 35_673, "test": 3_000 / 35_673}


# ----------------------------------------------------------------------------------------------------------
# The model pool: families, sizes, finetunes, re-uploads


@dataclass(frozen=True)
class FamilySpec:
    """One model family: a base model per size, each with the same finetunes."""

    name: str  # family name without the "synth-" prefix
    strength: float  # offset added to every skill: later "generations" are stronger
    sizes: tuple[float, ...]  # parameter counts in billions, one base model each
    finetunes: tuple[str, ...]  # variants of every base model: "chat", "math", "code", "med"


@dataclass(frozen=True)
class SyntheticSize:
    """What one ``size`` generates."""

    families: tuple[FamilySpec, ...]
    n_queries: int  # number of distinct queries
    # (original model, kind) per re-upload "<original>-reupload", which shares the original's skill vector;
    # kind "exact" also copies its labels (same weights, greedy decoding), "resampled" draws its own.
    reuploads: tuple[tuple[str, str], ...]
    missing_rate: float = 0.03  # fraction of (model, query) cells left unevaluated
    repeat_rate: float = 0.002  # fraction of rows written twice (EmbedLLM has repeated rows)


_FULL_FAMILIES = (
    FamilySpec("alpine", 0.0, (7, 13, 70), ("chat", "math", "code", "med")),
    FamilySpec("basalt", 0.4, (0.5, 1.8, 7, 14, 72), ("chat", "math", "code")),
    FamilySpec("cedar", 0.3, (7,), ("chat", "math", "code", "med")),
    FamilySpec("delta", 0.1, (2, 7), ("chat", "med")),
    FamilySpec("ember", -0.2, (1.3, 2.7), ("chat", "code")),
    FamilySpec("fjord", -0.4, (7, 40), ("chat", "med")),
    FamilySpec("granite", 0.2, (6, 34), ("chat", "math", "code")),
    FamilySpec("harbor", -1.0, (1, 2.8, 6.9, 12), ("chat",)),
    FamilySpec("iris", 0.3, (7, 67), ("chat", "math", "code")),
    FamilySpec("juniper", -0.3, (1, 7), ("chat", "med")),
    FamilySpec("kestrel", 0.3, (3, 8, 70), ("chat", "math", "code", "med")),
    FamilySpec("lumen", -0.6, (0.3, 1, 3), ("chat",)),
)
SIZES = {
    "full": SyntheticSize(
        families=_FULL_FAMILIES,
        n_queries=6_000,
        reuploads=(
            ("synth-alpine-7b-chat", "exact"),
            ("synth-basalt-7b-math", "exact"),
            ("synth-kestrel-8b-chat", "resampled"),
            ("synth-iris-7b-code", "resampled"),
        ),
    ),
    "small": SyntheticSize(
        families=(
            FamilySpec("alpine", 0.0, (7, 13), ("chat", "math", "code", "med")),
            FamilySpec("basalt", 0.4, (1.8, 7), ("chat", "math")),
            FamilySpec("delta", 0.1, (2, 7), ("chat", "med")),
        ),
        n_queries=600,
        reuploads=(("synth-alpine-7b-chat", "exact"), ("synth-basalt-7b-math", "resampled")),
        repeat_rate=0.004,
    ),
}

# Per-skill change per doubling of parameters (log2(params_b / 7)); truthfulness barely scales.
SIZE_SLOPE = dict(
    general=0.2, arithmetic=0.2, logic=0.15, knowledge=0.25, medicine=0.2, commonsense=0.15, truthfulness=-0.05
)
# Finetune boosts on the relevant skill and small losses elsewhere, relative to the base model.
FINETUNE_DELTA = {
    "base": {},
    "chat": dict(general=0.3, commonsense=0.3, truthfulness=1.3, arithmetic=-0.15),
    "math": dict(arithmetic=2.2, logic=0.7, knowledge=-0.4, medicine=-0.4, commonsense=-0.3, truthfulness=-0.3),
    "code": dict(
        logic=1.1, arithmetic=0.7, general=0.15, knowledge=-0.5, medicine=-0.45, commonsense=-0.45, truthfulness=-0.45
    ),
    "med": dict(medicine=2.5, knowledge=0.4, arithmetic=-0.45, logic=-0.3, commonsense=-0.15),
}
FAMILY_SKILL_SD = 0.35  # per-family, per-skill deviation around the family strength
MODEL_SKILL_SD = 0.15  # per-model idiosyncratic noise (re-uploads copy their original's vector)


def _vec(d: dict[str, float]) -> np.ndarray:
    return np.array([d.get(s, 0.0) for s in SKILLS])  # (K,)


def _size_tag(params_b: float) -> str:
    return f"{params_b:g}b"


def _model_specs(spec: SyntheticSize) -> list[dict]:
    """One dict per model, in pool order: base model, then its finetunes; re-uploads last."""
    rows: list[dict] = []
    for fam in spec.families:
        for size in fam.sizes:
            base = f"synth-{fam.name}-{_size_tag(size)}"
            for variant in ("base",) + fam.finetunes:
                name = base if variant == "base" else f"{base}-{variant}"
                rows.append(
                    dict(
                        model=name,
                        params_b=float(size),
                        family=f"synth-{fam.name}",
                        variant=variant,
                        base_model=base,
                        duplicate_of="",
                        duplicate_kind="",
                    )
                )
    by_name = {r["model"]: r for r in rows}
    for original, kind in spec.reuploads:
        if original not in by_name:
            raise ValueError(
                f"synthetic size spec: re-upload of unknown model {original!r}. "
                f"How to fix: name one of {sorted(by_name)}"
            )
        rows.append(
            {**by_name[original], "model": f"{original}-reupload", "duplicate_of": original, "duplicate_kind": kind}
        )
    return rows


# ----------------------------------------------------------------------------------------------------------
# The queries: ten synthetic look-alikes of EmbedLLM's benchmarks, their skill loadings and difficulty


@dataclass(frozen=True)
class BenchmarkSpec:
    """One synthetic benchmark: how many queries, how they are answered, which skills they load on."""

    name: str  # benchmark column value
    share: float  # fraction of the queries
    options: int  # answer options (0 = free-form answer, no guessing floor)
    difficulty: float  # mean b_q
    subtopics: dict[str, dict[str, float]]  # subtopic -> skill loadings (general is added to all)


BENCHMARKS = (
    BenchmarkSpec(
        "synth-mathqa",
        0.08,
        5,
        1.4,
        {
            "speed": dict(arithmetic=1.0, logic=0.2),
            "profit": dict(arithmetic=1.0, knowledge=0.2),
            "interest": dict(arithmetic=1.0, knowledge=0.3),
            "area": dict(arithmetic=0.9, knowledge=0.4),
            "ratio": dict(arithmetic=1.0, logic=0.3),
        },
    ),
    BenchmarkSpec(
        "synth-logiqa",
        0.06,
        4,
        1.1,
        {
            "deduction": dict(logic=1.1),
            "weaken": dict(logic=0.9, knowledge=0.2),
            "assumption": dict(logic=1.0, commonsense=0.2),
            "ordering": dict(logic=1.1, arithmetic=0.2),
        },
    ),
    BenchmarkSpec(
        "synth-medmcqa",
        0.12,
        4,
        1.2,
        {
            "pharmacology": dict(medicine=1.1, knowledge=0.3),
            "anatomy": dict(medicine=1.0, knowledge=0.4),
            "pathology": dict(medicine=1.1, knowledge=0.2),
            "microbiology": dict(medicine=1.0, knowledge=0.3),
        },
    ),
    BenchmarkSpec(
        "synth-piqa",
        0.06,
        2,
        -0.4,
        {
            "kitchen": dict(commonsense=1.0),
            "household": dict(commonsense=1.0),
            "outdoors": dict(commonsense=0.9, knowledge=0.2),
            "crafts": dict(commonsense=0.9, logic=0.2),
        },
    ),
    BenchmarkSpec(
        "synth-truthfulqa",
        0.06,
        4,
        1.0,
        {
            "misconceptions": dict(truthfulness=1.1, knowledge=0.2),
            "superstitions": dict(truthfulness=1.2),
            "health": dict(truthfulness=1.0, medicine=0.3),
            "history": dict(truthfulness=1.0, knowledge=0.3),
        },
    ),
    BenchmarkSpec(
        "synth-mmlu",
        0.36,
        4,
        0.5,
        {
            "high_school_biology": dict(knowledge=1.0, medicine=0.2),
            "world_history": dict(knowledge=1.1),
            "macroeconomics": dict(knowledge=0.9, arithmetic=0.2),
            "professional_law": dict(knowledge=0.9, logic=0.4),
            "college_physics": dict(knowledge=0.8, arithmetic=0.5),
            "college_medicine": dict(knowledge=0.5, medicine=0.8),
            "abstract_algebra": dict(knowledge=0.5, arithmetic=0.6, logic=0.4),
            "computer_science": dict(knowledge=0.7, logic=0.5),
            "philosophy": dict(knowledge=0.8, logic=0.3),
            "geography": dict(knowledge=1.0),
        },
    ),
    BenchmarkSpec(
        "synth-gsm8k",
        0.07,
        0,
        1.2,
        {
            "shopping": dict(arithmetic=1.0, logic=0.4),
            "wages": dict(arithmetic=1.0, logic=0.4),
            "baking": dict(arithmetic=1.0, logic=0.5),
            "saving": dict(arithmetic=1.0, logic=0.5),
        },
    ),
    BenchmarkSpec(
        "synth-gpqa",
        0.04,
        4,
        3.2,
        {
            "physics": dict(knowledge=0.7, arithmetic=0.5, logic=0.5),
            "chemistry": dict(knowledge=0.8, logic=0.6),
            "biology": dict(knowledge=0.8, medicine=0.3, logic=0.5),
        },
    ),
    BenchmarkSpec(
        "synth-asdiv",
        0.07,
        0,
        -0.8,
        {
            "addition": dict(arithmetic=0.8),
            "subtraction": dict(arithmetic=0.8),
            "multiplication": dict(arithmetic=0.9),
            "division": dict(arithmetic=1.0),
        },
    ),
    BenchmarkSpec(
        "synth-socialiqa",
        0.08,
        3,
        0.0,
        {
            "emotions": dict(commonsense=1.0),
            "intentions": dict(commonsense=0.9, logic=0.2),
            "next_action": dict(commonsense=1.0),
        },
    ),
)
GENERAL_LOADING = 0.3  # every query also loads on the general skill
LOADING_JITTER_SD = 0.35  # per-query log-normal jitter of each loading
DIFFICULTY_SD = 1.3  # per-query spread of b_q around the benchmark mean


def _benchmark_counts(n_queries: int) -> list[int]:
    """Queries per benchmark in proportion to ``share``, summing exactly to n_queries (largest remainder)."""
    shares = np.array([b.share for b in BENCHMARKS]) / sum(b.share for b in BENCHMARKS)
    raw = shares * n_queries
    counts = np.floor(raw).astype(int)
    counts[np.argsort(-(raw - counts), kind="stable")[: n_queries - counts.sum()]] += 1
    return counts.tolist()


# ----------------------------------------------------------------------------------------------------------
# Ground truth


@dataclass(frozen=True)
class SyntheticTruth:
    """The latent model behind a synthetic pool; ``probabilities()`` recomputes every P(correct)."""

    size: str
    seed: int
    skill_names: tuple[str, ...]  # K
    models: pd.DataFrame  # M rows: model, params_b, family, variant, base_model, duplicate_of, duplicate_kind
    skills: np.ndarray  # (M, K) theta_m
    query_ids: list[str]  # Q
    benchmarks: np.ndarray  # (Q,) str
    subtopics: np.ndarray  # (Q,) str
    loadings: np.ndarray  # (Q, K) a_q
    difficulty: np.ndarray  # (Q,) b_q
    guess: np.ndarray  # (Q,) c_q, 1/options for multiple choice, else 0
    split: np.ndarray  # (Q,) "train" | "val" | "test"

    def probabilities(self) -> np.ndarray:
        """P(correct) for every (model, query): (M, Q)."""
        logits = self.skills @ self.loadings.T - self.difficulty[None, :]  # (M, Q)
        return self.guess[None, :] + (1.0 - self.guess[None, :]) / (1.0 + np.exp(-logits))

    def duplicates(self) -> list[tuple[str, str, str]]:
        """(re-upload, original, kind) triples."""
        d = self.models[self.models["duplicate_of"] != ""]
        return list(zip(d["model"], d["duplicate_of"], d["duplicate_kind"]))

    def to_dict(self) -> dict:
        return {
            "synthetic": True,
            "size": self.size,
            "seed": self.seed,
            "latent_model": "P(correct) = guess + (1 - guess) * sigmoid(loadings . skills - difficulty)",
            "skill_names": list(self.skill_names),
            "models": [
                {
                    **{k: (v if k != "params_b" else float(v)) for k, v in row.items()},
                    "skills": [round(float(x), 6) for x in s],
                }
                for row, s in zip(self.models.to_dict("records"), self.skills)
            ],
            "families": {f: g["model"].tolist() for f, g in self.models.groupby("family", sort=True)},
            "duplicates": [dict(model=m, duplicate_of=o, kind=k) for m, o, k in self.duplicates()],
            "queries": {
                "query_id": self.query_ids,
                "benchmark": self.benchmarks.tolist(),
                "subtopic": self.subtopics.tolist(),
                "split": self.split.tolist(),
                "difficulty": [round(float(x), 6) for x in self.difficulty],
                "guess": [round(float(x), 6) for x in self.guess],
                "loadings": [[round(float(x), 6) for x in row] for row in self.loadings],
            },
        }

    @classmethod
    def from_dict(cls, d: dict) -> SyntheticTruth:
        models = pd.DataFrame([{k: v for k, v in m.items() if k != "skills"} for m in d["models"]])
        q = d["queries"]
        return cls(
            size=d["size"],
            seed=d["seed"],
            skill_names=tuple(d["skill_names"]),
            models=models,
            skills=np.array([m["skills"] for m in d["models"]], dtype=np.float64),
            query_ids=list(q["query_id"]),
            benchmarks=np.array(q["benchmark"], dtype=object),
            subtopics=np.array(q["subtopic"], dtype=object),
            loadings=np.array(q["loadings"], dtype=np.float64),
            difficulty=np.array(q["difficulty"], dtype=np.float64),
            guess=np.array(q["guess"], dtype=np.float64),
            split=np.array(q["split"], dtype=object),
        )


def load_synthetic_truth(path: Path) -> SyntheticTruth:
    """Read synthetic_truth.json written by ``generate_synthetic_pool``."""
    return SyntheticTruth.from_dict(json.loads(Path(path).read_text()))


# ----------------------------------------------------------------------------------------------------------
# The tables


def make_synthetic_tables(size: str = "small", seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, SyntheticTruth]:
    """Generate the synthetic pool in memory, deterministically from (size, seed).

    Returns:
        evaluations: long format, columns model, query_id, query, benchmark, score (0.0 / 1.0), split; a few %
            of (model, query) cells are absent and a few rows appear twice (exact duplicates).
        models: columns model, params_b, family, variant, base_model, duplicate_of ("" unless a re-upload).
        truth: the latent model (skills, query loadings, difficulties, duplicates).
    """
    if size not in SIZES:
        raise ValueError(f"make_synthetic_tables: unknown size {size!r}. How to fix: use one of {sorted(SIZES)}")
    spec = SIZES[size]
    rng_models, rng_text, rng_queries, rng_split, rng_labels, rng_missing, rng_repeat = (
        np.random.default_rng(s) for s in np.random.SeedSequence([seed, 0x10C05]).spawn(7)
    )
    K = len(SKILLS)

    # Models: theta_m = family base + size effect + finetune delta + noise; re-uploads copy their original.
    specs = _model_specs(spec)
    models = pd.DataFrame(specs)
    fam_base = {
        f"synth-{f.name}": f.strength + FAMILY_SKILL_SD * rng_models.standard_normal(K) for f in spec.families
    }  # each (K,)
    slope = _vec(SIZE_SLOPE)
    noise = MODEL_SKILL_SD * rng_models.standard_normal((len(specs), K))  # (M, K)
    skills = np.zeros((len(specs), K))
    index: dict[str, int] = {}  # model -> its row
    for i, s in enumerate(specs):
        if s["duplicate_of"]:
            skills[i] = skills[index[s["duplicate_of"]]]
        else:
            skills[i] = (
                fam_base[s["family"]]
                + slope * np.log2(s["params_b"] / 7.0)
                + _vec(FINETUNE_DELTA[s["variant"]])
                + noise[i]
            )
        index[s["model"]] = i

    # Queries: benchmark blocks in EmbedLLM's order, random subtopic, text unique across the pool.
    plan = [(b.name, list(b.subtopics), n) for b, n in zip(BENCHMARKS, _benchmark_counts(spec.n_queries))]
    bench, sub, texts = query_texts(rng_text, plan)
    Q = len(texts)
    by_name = {b.name: b for b in BENCHMARKS}
    base_load = np.stack([_vec({"general": GENERAL_LOADING, **by_name[b].subtopics[s]}) for b, s in zip(bench, sub)])
    loadings = base_load * np.exp(LOADING_JITTER_SD * rng_queries.standard_normal((Q, K)))  # (Q, K), >= 0
    difficulty = np.array([by_name[b].difficulty for b in bench]) + DIFFICULTY_SD * rng_queries.standard_normal(Q)
    guess = np.array([1.0 / by_name[b].options if by_name[b].options else 0.0 for b in bench])
    query_ids = [str(i) for i in range(Q)]  # integers, like EmbedLLM's prompt_id: kept by the EmbedLLM round trip

    # Split by query in EmbedLLM's proportions.
    n_val = n_test = int(round(Q * SPLIT_FRACTIONS["val"]))
    split = np.full(Q, "train", dtype=object)
    perm = rng_split.permutation(Q)
    split[perm[:n_val]], split[perm[n_val : n_val + n_test]] = "val", "test"

    truth = SyntheticTruth(
        size=size,
        seed=seed,
        skill_names=SKILLS,
        models=models,
        skills=skills,
        query_ids=query_ids,
        benchmarks=np.array(bench, dtype=object),
        subtopics=np.array(sub, dtype=object),
        loadings=loadings,
        difficulty=difficulty,
        guess=guess,
        split=split,
    )

    # Labels: Bernoulli(P); an "exact" re-upload returns its original's answers, a "resampled" one its own draw.
    probs = truth.probabilities()  # (M, Q)
    labels = (rng_labels.random(probs.shape) < probs).astype(np.float64)
    for i, s in enumerate(specs):
        if s["duplicate_kind"] == "exact":
            labels[i] = labels[index[s["duplicate_of"]]]
    present = rng_missing.random(probs.shape) >= spec.missing_rate  # (M, Q) True = evaluated
    mi, qi = np.nonzero(present)  # model-major order
    n = len(mi)
    rows = np.sort(
        np.concatenate([np.arange(n), rng_repeat.choice(n, max(2, int(spec.repeat_rate * n)), replace=False)])
    )
    mi, qi = mi[rows], qi[rows]
    model_names = models["model"].to_numpy(dtype=object)
    evaluations = pd.DataFrame(
        {
            "model": model_names[mi],
            "query_id": np.array(query_ids, dtype=object)[qi],
            "query": np.array(texts, dtype=object)[qi],
            "benchmark": truth.benchmarks[qi],
            "score": labels[mi, qi],
            "split": split[qi],
        }
    )
    models_table = models[["model", "params_b", "family", "variant", "base_model", "duplicate_of"]].copy()
    return evaluations, models_table, truth
