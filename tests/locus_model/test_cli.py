"""The locus command line: evaluate end to end on a tiny table, synthetic-data (and its old name), and errors that
say what to do."""

from __future__ import annotations

import json

import pytest

from locus_model.cli import build_parser, main
from tests.locus_model.cli_runs import isolated_home, run_evaluate  # noqa: F401 (an autouse fixture)
from tests.locus_model.tables import write_table


def test_evaluate_writes_results(tmp_path, capsys):
    code, out = run_evaluate(
        tmp_path, write_table(tmp_path / "evals.csv"), "--folds", "2", "--methods", "locus,knn,best_single,oracle"
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert set(result) == {"settings", "sizes", "wall_s", "verdict", "warnings", "methods"}
    assert result["settings"]["encoder"] == "hashing-256" and result["settings"]["protocol"] == "kfold"
    assert result["settings"]["holdout_models"] == 0.2 and result["sizes"]["held_out_models"] == 2
    assert result["settings"]["train_config"]["epochs"] == 2 and result["settings"]["model_config"]["query_dim"] == 256
    assert set(result["methods"]) == {"locus", "knn", "best_single", "oracle"}
    assert set(result["methods"]["locus"]) == {"all", "in_training", "held_out"}
    printed = capsys.readouterr().out
    assert "[held_out]" in printed and "wrote" in printed
    verdict = result["verdict"]
    assert set(verdict) == {
        "pays",
        "best_single",
        "delta",
        "lo",
        "hi",
        "cost_share",
        "cost_note",
        "cheaper",
        "kept_on_best_single",
    }
    assert verdict["lo"] <= verdict["delta"] <= verdict["hi"] and verdict["pays"] == (verdict["lo"] > 0)
    first = printed.splitlines()[0]  # the verdict comes first, before the table
    assert (
        first.startswith("routing pays" if verdict["pays"] else "routing does not pay")
        and verdict["best_single"] in first
    )
    assert (tmp_path / "cache" / "encodings" / "hashing-256").is_dir()  # the library's user cache, not a LOCUS_HOME


def test_evaluate_uses_a_tables_own_split(tmp_path):
    code, out = run_evaluate(
        tmp_path, write_table(tmp_path / "evals.csv", split=True), "--methods", "best_single,oracle"
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert result["settings"]["protocol"] == "table_split" and result["settings"]["holdout_models"] == 0.0
    assert result["sizes"]["test_queries"] == [10]


def test_evaluate_errors_are_reported(tmp_path, capsys):
    code, _ = run_evaluate(tmp_path, tmp_path / "missing.csv")
    assert code == 2 and "no such file" in capsys.readouterr().err
    code, _ = run_evaluate(tmp_path, write_table(tmp_path / "evals.csv"), "--budget", "500", "--folds", "2")
    err = capsys.readouterr().err
    assert code == 2 and "lower --budget" in err
    code, _ = run_evaluate(tmp_path, write_table(tmp_path / "evals.csv"), "--methods", "locus,magic")
    assert code == 2 and "magic" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", "--budget", "16"])  # --evaluations and --out are required


def test_evaluate_holds_out_the_named_models(tmp_path, capsys):
    table = write_table(tmp_path / "evals.csv")
    code, out = run_evaluate(
        tmp_path, table, "--folds", "2", "--methods", "best_single", "--holdout-models", "org/model 7, org/model 1"
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert result["settings"]["held_out_model_names"] == ["org/model 1", "org/model 7"]
    assert result["settings"]["holdout_models"] == 0.25 and result["sizes"]["held_out_models"] == 2
    code, _ = run_evaluate(tmp_path, table, "--folds", "2", "--holdout-models", "org/model 7,gpt-9")
    err = capsys.readouterr().err
    assert code == 2 and "gpt-9 not among the table's 8 models" in err and "org/model 7 not" not in err
    code, _ = run_evaluate(tmp_path, table, "--folds", "2", "--holdout-models", "1.5")
    assert code == 2 and "must be in [0, 1)" in capsys.readouterr().err


def test_evaluate_on_one_model_says_it_needs_two(tmp_path, capsys):
    table = write_table(tmp_path / "evals.csv", n_models=1)
    code, _ = run_evaluate(tmp_path, table, "--holdout-models", "0", "--folds", "2", "--methods", "locus,best_single")
    err = capsys.readouterr().err
    assert code == 2 and "needs at least 2 models" in err and "NaN" not in err


def test_evaluate_refuses_a_models_file_price_that_is_not_a_number(tmp_path, capsys):
    """A price of "abc" is an error at its file, row and column, not a silent switch to parameters as the cost."""
    models = tmp_path / "models.csv"
    models.write_text("model,params_b,price_input_per_mtok\norg/model 0,1,0.1\norg/model 1,2,abc\n")
    code, _ = run_evaluate(tmp_path, write_table(tmp_path / "evals.csv"), "--models-file", str(models))
    assert code != 0
    assert (
        f"{models}, row 2 (line 3), column 'price_input_per_mtok': price_input_per_mtok 'abc' is not a number"
        in capsys.readouterr().err
    )


def test_evaluate_with_a_models_file_gives_every_methods_frontier(tmp_path, capsys):
    """--models-file: the frontier of every method in the JSON (frontier.<router>.<figure>: mean and interval) and
    printed; the model without a price left out and counted, never priced; --plot draws it."""
    from locus_model.evaluation.results import flatten_results

    models = tmp_path / "models.csv"  # the models file's columns; org/model 7 has a size but no price
    models.write_text(
        "model,params_b,price_input_per_mtok,price_output_per_mtok\n"
        + "".join(f"org/model {m},{m + 1},{0.1 * (m + 1)},{0.2 * (m + 1)}\n" for m in range(7))
        + "org/model 7,8,,\n"
    )
    code, out = run_evaluate(
        tmp_path,
        write_table(tmp_path / "evals.csv"),
        "--folds",
        "2",
        "--methods",
        "locus,knn,best_single",
        "--models-file",
        str(models),
        "--plot",
        str(tmp_path / "f.png"),
    )
    assert code == 0
    result = json.loads(out.read_text())
    costs = result["settings"]["costs"]
    assert costs["basis"] == "usd" and costs["models_of_unknown_cost"] == 1 and costs["unknown_cost"] == ["org/model 7"]
    frontier = result["frontier"]
    assert set(frontier) == {"locus", "knn", "best_single", "threshold_locus", "random_mix"}
    for router, figures in frontier.items():
        for figure in ("aiq", "cost_share_at_best_single", "cost_share_at_95"):
            assert set(figures[figure]) == {"mean", "ci_low", "ci_high"} | (
                {"not_reached"} if figure != "aiq" else set()
            ), (router, figure)
        assert 0 <= figures["aiq"]["mean"] <= 1
    assert all(fold["models_of_known_cost"] == 7 for fold in result["frontier_folds"])
    chosen = {fold["best_single"] for fold in result["frontier_folds"]} | {
        fold["cheapest"] for fold in result["frontier_folds"]
    }
    assert "org/model 7" not in chosen
    assert frontier["random_mix"]["cost_share_at_best_single"]["mean"] == pytest.approx(1.0)  # the line's end
    printed = capsys.readouterr().out
    assert "Quality-cost frontier" in printed and "1 model(s) of unknown cost left out" in printed
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    flat = flatten_results(result)
    row = flat[(flat["method"] == "locus") & (flat["metric"] == "frontier.aiq.mean")]
    assert row["mean"].tolist() == [pytest.approx(frontier["locus"]["aiq"]["mean"])]


def test_evaluate_frontier_errors_say_what_to_do(tmp_path, capsys):
    table = write_table(tmp_path / "evals.csv")
    code, _ = run_evaluate(tmp_path, table, "--plot", str(tmp_path / "f.png"))
    assert code == 2 and "needs --models-file" in capsys.readouterr().err
    code, _ = run_evaluate(tmp_path, table, "--models-file", str(tmp_path / "nope.csv"))
    assert code == 2 and "--models-file" in capsys.readouterr().err
    unpriced = tmp_path / "models.csv"
    unpriced.write_text("model,family\norg/model 0,x\n")
    code, _ = run_evaluate(tmp_path, table, "--folds", "2", "--methods", "best_single", "--models-file", str(unpriced))
    assert code == 2 and "no quality-cost frontier" in capsys.readouterr().err


def test_synthetic_data_small(tmp_path, capsys):
    assert main(["synthetic-data", "--out", str(tmp_path), "--size", "small", "--seed", "1"]) == 0
    root = tmp_path / "synthetic"
    assert (root / "evaluations.parquet").is_file() and (root / "README.txt").is_file()
    out = capsys.readouterr()
    assert "synthetic" in out.out and "deprecated" not in out.err


def test_parser_lists_subcommands():
    text = build_parser().format_help()
    assert "evaluate" in text and "synthetic-data" in text


@pytest.mark.e2e
def test_evaluate_small_synthetic_pool_with_minilm(tmp_path):
    """End to end with the real MiniLM encoder on the small synthetic pool (~1 min on 2 cores)."""
    assert main(["synthetic-data", "--out", str(tmp_path), "--size", "small"]) == 0
    out = tmp_path / "result.json"
    code = main(
        [
            "evaluate",
            "--evaluations",
            str(tmp_path / "synthetic" / "evaluations.parquet"),
            "--folds",
            "2",
            "--budget",
            "128",
            "--epochs",
            "5",
            "--threads",
            "1",
            "--quiet",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert result["settings"]["encoder"] == "all-MiniLM-L6-v2" and result["settings"]["encoding_dim"] == 384
    oracle = result["methods"]["oracle"]["all"]["routing_acc"]["mean"]
    for method in ("locus", "embedllm_mf", "irt", "knn", "best_single"):
        assert 0 < result["methods"][method]["all"]["routing_acc"]["mean"] <= oracle


def test_evaluate_reports_a_corrupt_file_in_one_line(tmp_path, capsys):
    import gzip

    data = gzip.compress(write_table(tmp_path / "evals.csv").read_bytes())
    (tmp_path / "evals.csv.gz").write_bytes(data[: len(data) // 2])  # a cut download
    code, _ = run_evaluate(tmp_path, tmp_path / "evals.csv.gz")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("locus evaluate: error: ") and "evals.csv.gz" in err and "gzip" in err and "How to fix" in err


def test_evaluate_checks_its_arguments_before_importing_torch(tmp_path):
    """A wrong path fails before torch is imported (the child asserts it), not after seconds of imports."""
    import subprocess
    import sys

    code = (
        "import sys; from locus_model.cli import main; rc = main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules, 'torch was imported'; raise SystemExit(rc)"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "evaluate",
            "--evaluations",
            str(tmp_path / "missing.csv"),
            "--out",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "no such file or folder" in done.stderr, done.stderr
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "evaluate",
            "--evaluations",
            str(tmp_path),
            "--out",
            str(tmp_path / "nowhere" / "r.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "does not exist" in done.stderr, done.stderr


def test_the_fits_an_evaluation_runs_count_for_the_jobs_default():
    from locus_model.cli import fit_count

    assert fit_count(5, ["locus", "embedllm_mf", "irt", "knn", "per_benchmark", "best_single", "oracle"]) == 30
    assert fit_count(5, ["locus", "oracle"]) == 10  # best single always runs, the oracle fits nothing
    assert fit_count(None, ["locus", "best_single"]) == 2  # the table's own split: one fold


def test_evaluate_stream_replays_a_scenario_and_draws_its_curves(tmp_path, capsys):
    plot = tmp_path / "curve.png"
    code, out = run_evaluate(
        tmp_path,
        write_table(tmp_path / "evals.csv"),
        "--stream",
        "stationary",
        "--stream-seeds",
        "1",
        "--stream-events",
        "300",
        "--plot",
        str(plot),
    )
    assert code == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    methods = result["stream"]["stationary"]["methods"]
    assert set(methods) == {
        "learning",
        "frozen",
        "thompson_group",
        "thompson",
        "best_single",
        "rule_full_labels",
        "oracle",
    }
    assert all(methods[m]["routing_acc"] <= methods["oracle"]["routing_acc"] for m in methods)
    assert plot.stat().st_size > 0 and "learning minus it" in capsys.readouterr().out


def test_evaluate_stream_arguments_are_checked(tmp_path, capsys):
    table = write_table(tmp_path / "evals.csv")
    code, _ = run_evaluate(tmp_path, table, "--stream", "sunny")
    assert code == 2 and "choose from stationary" in capsys.readouterr().err
    code, _ = run_evaluate(tmp_path, table, "--stream", "drift", "--stream-feedback", "1.5")
    assert code == 2 and "--stream-feedback" in capsys.readouterr().err


def test_evaluate_stream_says_first_whether_learning_pays(tmp_path, capsys):
    code, _ = run_evaluate(
        tmp_path, write_table(tmp_path / "evals.csv"), "--stream", "stationary", "--stream-seeds", "1",
        "--stream-events", "300",
    )  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    lines = out.out.splitlines()
    assert lines[0].startswith("learning ") and "over frozen" in lines[0]
    assert lines[1].startswith("warning: only 1 seed(s)")
    assert "fits," not in out.err  # the replay counts its trainings, not the folds' fits


def test_evaluate_stream_log_replays_a_log_of_graded_answers(tmp_path, capsys):
    from tests.locus_model.evaluation.stream_logs import graded_log

    path = tmp_path / "log.csv"
    graded_log(40).to_csv(path, index=False)
    out = tmp_path / "results.json"
    code = main(
        ["evaluate", "--stream-log", str(path), "--stream-log-start", "1000", "--stream-seeds", "1",
         "--encoder", "hashing-256", "--epochs", "2", "--patience", "2", "--device", "cpu", "--threads", "1",
         "--out", str(out), "--guard-margin", "measured"]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(out.read_text())
    assert result["settings"]["events"] == 40 and result["settings"]["start"] == 1000
    assert result["settings"]["config"]["guard_margin"] == "measured"
    assert captured.out.splitlines()[0].startswith("learning ") and "stream: log" in captured.out
    assert "the replay trains LOCUS 1 time(s)" in captured.err


def test_evaluate_stream_log_arguments_are_checked(tmp_path, capsys):
    code = main(["evaluate", "--stream-log", str(tmp_path / "none.csv"), "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and "--stream-log" in err and "no such file" in err
    table = write_table(tmp_path / "evals.csv")
    code = main(
        ["evaluate", "--stream-log", str(table), "--evaluations", str(table), "--out", str(tmp_path / "r.json")]
    )
    assert code == 2 and "drop --evaluations" in capsys.readouterr().err
    code = main(["evaluate", "--out", str(tmp_path / "r.json")])
    assert code == 2 and "--evaluations is required" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("model,query_id,query,benchmark,score\nm,q,text,b,1\n")
    code = main(["evaluate", "--stream-log", str(bad), "--encoder", "hashing-256", "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and "column 'time'" in err and "How to fix" in err


def test_evaluate_guard_margin_takes_a_number_or_measured(tmp_path, capsys):
    parser = build_parser()
    base = ["evaluate", "--evaluations", "x.csv", "--out", "r.json"]
    assert parser.parse_args([*base, "--guard-margin", "measured"]).guard_margin == "measured"
    assert parser.parse_args([*base, "--guard-margin", "0.05"]).guard_margin == 0.05
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--guard-margin", "wide"])
    assert "a number in [0, 1) or 'measured'" in capsys.readouterr().err
