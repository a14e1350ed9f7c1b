"""Regenerate tests/fixtures/harnesses/ with the REAL evaluation harnesses, offline, on small local tasks.

The harnesses are not project dependencies: install them in a separate venv (they pull datasets, evaluate, boto3):

    python3.11 -m venv /work/harness-venv
    /work/harness-venv/bin/pip install -r scripts/harness-requirements.txt
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 /work/harness-venv/bin/python scripts/make_harness_fixtures.py

What it writes under tests/fixtures/harnesses/ (the task definitions and data are in sources/):
- lm_eval/<model>/results_<time>.json + samples_<task>_<time>.jsonl: `lm_eval --model dummy --log_samples` on the
  YAML tasks locus_capitals (multiple choice, 2-shot, acc/acc_norm) and locus_arithmetic (generate_until,
  exact_match), data from local JSON files (`dataset_path: json`), for two "models": the dummy model named
  dummy-a (seed 1) and dummy-b (seed 2) through `--model_args pretrained=<name>` (the dummy ignores it; lm-eval
  records it as the model's name). The dummy scores choices at random, so the seeds give different scores.
- inspect/: Inspect AI's `mockllm/model-a` (an .eval log per task) and `mockllm/model-b` (a .json log per task)
  on the tasks in sources/inspect_tasks.py; each mock answers from a fixed table (custom_outputs), so the two
  models get different scores.
- lighteval/: lighteval's DummyModel named dummy-a (seed 1) and dummy-b (seed 2) on the custom task in
  sources/lighteval_tasks.py (data: sources/lighteval_data/test.jsonl, loaded from the local folder), with
  --save-details: results/<model>/results_<time>.json and details/<model>/<time>/details_capitals|0_<time>.parquet.
  lighteval needs its own venv (it pulls torch and transformers; pin the CPU torch):
      python3.11 -m venv /work/lighteval-venv
      /work/lighteval-venv/bin/pip install -r scripts/lighteval-requirements.txt
      /work/lighteval-venv/bin/python scripts/make_harness_fixtures.py --only lighteval
  Offline, lighteval 0.13 needs two workarounds, both made here: its registry imports every built-in task module
  and some fail at import time (tiny_benchmarks downloads a file, mt_bench/mix_eval call the hub with arguments
  huggingface_hub 2.x refuses): a built-in task module that fails to import is replaced by an empty one; and it
  hashes text with xxhash, which 4.x refuses for str: xxhash<4 is pinned.
- helm/: `helm-run --run-entries simple_mcqa:model=simple/model1 ... --max-eval-instances 5` and the same for
  simple/model2, suite "fixtures": HELM's own debugging scenario (even/odd questions, multiple_choice_joint,
  exact_match) answered by its SimpleClient (it echoes the prompt's last word, so every answer is wrong);
  simple/model2 is a second deployment of the same client declared in a local prod_env (HELM ships only
  simple/model1). The run folders are copied as helm-run wrote them (benchmark_output/runs/fixtures/<run>/).
  HELM needs its own venv too:
      python3.11 -m venv /work/helm-venv
      /work/helm-venv/bin/pip install torch==2.13.0 crfm-helm==0.5.16
      /work/helm-venv/bin/python scripts/make_harness_fixtures.py --only helm
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "harnesses"
SOURCES = FIXTURES / "sources"
LM_EVAL_MODELS = (("dummy-a", 1), ("dummy-b", 2))
# what each mock model answers, by a word of the question: model-a knows France/Japan/Kenya and 2 + 2, 3 * 5;
# model-b knows France/Canada and 2 + 2, 10 - 7, 9 / 3
INSPECT_ANSWERS = {
    "model-a": {
        "France": "B",
        "Japan": "A",
        "Canada": "A",
        "Kenya": "D",
        "Peru": "B",
        "2 + 2": "4",
        "3 * 5": "15",
        "10 - 7": "4",
        "9 / 3": "2",
    },
    "model-b": {
        "France": "B",
        "Japan": "C",
        "Canada": "C",
        "Kenya": "A",
        "Peru": "C",
        "2 + 2": "4",
        "3 * 5": "8",
        "10 - 7": "3",
        "9 / 3": "3",
    },
}


def offline_env(cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(cache / "datasets"),
        "HF_HOME": str(cache / "hf"),
        "TOKENIZERS_PARALLELISM": "false",
    }


def make_lm_eval(out: Path, cache: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    lm_eval = Path(sys.executable).parent / "lm_eval"
    for name, seed in LM_EVAL_MODELS:
        subprocess.run(
            [
                str(lm_eval),
                "--model",
                "dummy",
                "--model_args",
                f"pretrained={name}",
                "--include_path",
                ".",
                "--tasks",
                "locus_capitals,locus_arithmetic",
                "--output_path",
                str(out),
                "--log_samples",
                "--seed",
                str(seed),
            ],
            cwd=SOURCES,
            env=offline_env(cache),
            check=True,
        )


def make_inspect(out: Path) -> None:
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    sys.path.insert(0, str(SOURCES))
    from inspect_tasks import arithmetic, capitals

    shutil.rmtree(out, ignore_errors=True)
    for name, log_format in (("model-a", "eval"), ("model-b", "json")):
        table = INSPECT_ANSWERS[name]

        def answer(messages, tools, tool_choice, config, table=table, name=name):  # noqa: ANN001, ANN202 (mockllm's callable)
            text = messages[-1].text
            reply = next((a for key, a in table.items() if key in text), "no idea")
            content = f"ANSWER: {reply}" if len(reply) == 1 and reply.isalpha() else reply
            output = ModelOutput.from_content(model=name, content=content)
            # with usage given, mockllm does not count tokens with tiktoken (whose encoding file is downloaded)
            output.usage = ModelUsage(
                input_tokens=len(text.split()), output_tokens=1, total_tokens=len(text.split()) + 1
            )
            return output

        model = get_model(f"mockllm/{name}", custom_outputs=answer)
        logs = inspect_eval(
            [capitals(), arithmetic()], model=model, log_dir=str(out), log_format=log_format, display="none"
        )
        failed = [(log.eval.task, log.error.message if log.error else "") for log in logs if log.status != "success"]
        if failed:
            raise SystemExit(f"Inspect runs failed: {failed}")


LIGHTEVAL_RUN = """
import importlib, sys, types
_import = importlib.import_module
def tolerant(name, package=None):  # a built-in task module failing at import time (offline) -> an empty one
    try:
        return _import(name, package)
    except Exception as err:
        if not name.startswith("lighteval.tasks.tasks."):
            raise
        print(f"[fixtures] skipped lighteval's built-in task module {name}: {type(err).__name__}", file=sys.stderr)
        stub = types.ModuleType(name)
        stub.TASKS_TABLE = []
        return stub
importlib.import_module = tolerant
from lighteval.logging.evaluation_tracker import EvaluationTracker
from lighteval.models.dummy.dummy_model import DummyModelConfig
from lighteval.pipeline import ParallelismManager, Pipeline, PipelineParameters
name, seed, out, tasks_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
pipeline = Pipeline(tasks="capitals|0", evaluation_tracker=EvaluationTracker(output_dir=out, save_details=True),
                    pipeline_parameters=PipelineParameters(launcher_type=ParallelismManager.NONE,
                    custom_tasks_directory=tasks_file), model_config=DummyModelConfig(model_name=name, seed=seed))
pipeline.evaluate()
pipeline.save_and_push_results()
"""


def make_lighteval(out: Path, cache: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    for name, seed in LM_EVAL_MODELS:  # one process per model: lighteval keeps state between pipelines
        subprocess.run(
            [sys.executable, "-c", LIGHTEVAL_RUN, name, str(seed), str(out), str(SOURCES / "lighteval_tasks.py")],
            cwd=cache,
            env=offline_env(cache),
            check=True,
        )


HELM_MODEL2 = {
    "model_deployments.yaml": "model_deployments:\n  - name: simple/model2\n    model_name: simple/model2\n"
    "    tokenizer_name: simple/tokenizer1\n    max_sequence_length: 2048\n    client_spec:\n"
    "      class_name: helm.clients.simple_client.SimpleClient\n",
    "model_metadata.yaml": "models:\n  - name: simple/model2\n    display_name: Simple Model 2\n"
    "    description: a second deployment of HELM's SimpleClient, for fixtures with two models\n"
    "    creator_organization_name: Helm\n    access: open\n    release_date: 2023-01-01\n"
    "    tags: [TEXT_MODEL_TAG, FULL_FUNCTIONALITY_TEXT_MODEL_TAG]\n",
}


def make_helm(out: Path, cache: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    (cache / "prod_env").mkdir(parents=True, exist_ok=True)
    for name, text in HELM_MODEL2.items():
        (cache / "prod_env" / name).write_text(text, encoding="utf-8")
    helm_run = Path(sys.executable).parent / "helm-run"
    for model in ("simple/model1", "simple/model2"):
        subprocess.run(
            [
                str(helm_run),
                "--run-entries",
                f"simple_mcqa:model={model}",
                "--suite",
                "fixtures",
                "--max-eval-instances",
                "5",
                "-o",
                str(cache / "benchmark_output"),
            ],
            cwd=cache,
            env=offline_env(cache),
            check=True,
        )
    shutil.copytree(cache / "benchmark_output" / "runs" / "fixtures", out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only",
        choices=["lm_eval", "inspect", "lighteval", "helm"],
        help="regenerate one harness's fixtures only (default: lm_eval and inspect, in the harness venv)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(offline_env(Path(tmp)))
        if args.only in (None, "lm_eval"):
            make_lm_eval(FIXTURES / "lm_eval", Path(tmp))
        if args.only in (None, "inspect"):
            make_inspect(FIXTURES / "inspect")
        if args.only == "lighteval":
            make_lighteval(FIXTURES / "lighteval", Path(tmp))
        if args.only == "helm":
            make_helm(FIXTURES / "helm", Path(tmp))
    print(f"fixtures written under {FIXTURES}")


if __name__ == "__main__":
    main()
