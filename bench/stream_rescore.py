"""Route the replay's kept streams again (bench/bench_stream.py keeps each seed's) under other learner settings: the
learner's defaults were checked this way, with no training per setting.

    python -m bench.stream_rescore --suite mmlu --scenarios stationary,unlike --set explore=0.05,half_life=500
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path
from typing import Any

from bench.common import CACHE
from locus_model.evaluation.results import json_clean, save_results
from locus_model.evaluation.stream import (
    StreamConfig,
    _config_dict,
    format_stream,
    plot_stream,
    score_stream,
    summarise,
)
from locus_model.learning import LearningConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", required=True)
    ap.add_argument("--scenarios", default="stationary,unlike,newcomer,drift,poisoned")
    ap.add_argument("--set", action="append", default=[], help="k=v,k=v of LearningConfig; one --set per setting")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the whole result JSON (and its curves as .png) of the one setting: the bench's figures",
    )
    args = ap.parse_args()
    folder = CACHE / "stream" / f"streams_{args.suite}"
    for setting in args.set or [""]:
        overrides: dict[str, Any] = {k: float(v) for k, v in (kv.split("=") for kv in setting.split(",") if kv)}
        learning = LearningConfig(**overrides)  # NAME=VALUE,..., every value read as a float
        config = StreamConfig(learning=learning, n_boot=500)
        row, full = {}, {}
        for scenario in args.scenarios.split(","):
            runs = []
            for path in sorted(folder.glob(f"{scenario}_*.pkl")):
                with open(path, "rb") as f:
                    stream, info = pickle.load(f)
                seed = int(path.stem.rsplit("_", 1)[1])
                runs.append(score_stream(scenario, stream, info, seed=seed, config=config))
            if not runs:
                continue
            models = (
                json.loads((folder / "models.json").read_text())
                if (folder / "models.json").is_file()
                else [str(i) for i in range(len(stream.labels))]
            )
            r = full[scenario] = summarise(scenario, runs, models, config)
            row[scenario] = {
                "learning": round(100 * r["methods"]["learning"]["routing_acc"], 2),
                "frozen": round(100 * r["methods"]["frozen"]["routing_acc"], 2),
                "thompson_group": round(100 * r["methods"]["thompson_group"]["routing_acc"], 2),
                "rule": round(100 * r["methods"]["rule_full_labels"]["routing_acc"], 2),
                **{k: r[k] for k in ("newcomer_share_at_500", "informed_share_at_500", "events_to_shift") if k in r},
                **({"poison": round(100 * r["poison_effect"]["mean"], 2)} if "poison_effect" in r else {}),
            }
        print(setting or "defaults", json.dumps(row), flush=True)
        if args.out is not None:
            seeds = sorted({int(p.stem.rsplit("_", 1)[1]) for p in folder.glob("*.pkl")})
            result = json_clean(
                {
                    "settings": {
                        "seeds": len(seeds),
                        "seed_list": seeds,
                        "scenarios": list(full),
                        "models": models,
                        "config": _config_dict(config),
                        "kept_streams": str(folder.relative_to(CACHE.parent.parent)),
                        "command": " ".join(["python -m bench.stream_rescore", *sys.argv[1:]]),
                    },
                    "stream": full,
                }
            )
            save_results(result, args.out)
            print(format_stream(result))
            print(f"wrote {args.out}, {plot_stream(result, args.out.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
