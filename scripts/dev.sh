#!/usr/bin/env bash
# make dev: dagster dev (webserver + daemon) and the MLflow UI on 127.0.0.1, stopped together on Ctrl-C.
# Ctrl-C asks both to stop, waits at most STOP_GRACE_S seconds (default 10), then SIGKILLs whatever is left of
# their process groups: everything is gone within ~STOP_GRACE_S + 1 s. SIGTERM (a service manager, `docker stop`,
# `timeout`) does the same with TERM_GRACE_S (default 3): dagster dev stops its webserver and daemon at once but
# waits ~10 s for its code server, which is killed instead (a run it was executing is failed and retried by the
# sensors, locus_pipeline/runs.py).
# Environment: LOCUS_HOME, DAGSTER_PORT (3000), MLFLOW_PORT (5000), VENV (.venv), STOP_GRACE_S (10),
# TERM_GRACE_S (3), DAGSTER_LOG_LEVEL (info).
set -euo pipefail
set -m  # each background job gets its own process group: dagster dev ignores SIGINT otherwise (stack.md)
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# this checkout's code is what runs (dagster dev starts from DAGSTER_HOME, where the repository is not on sys.path)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export LOCUS_HOME="${LOCUS_HOME:-$PWD/data}"
DAGSTER_PORT="${DAGSTER_PORT:-3000}"
MLFLOW_PORT="${MLFLOW_PORT:-5000}"
export DAGSTER_PORT MLFLOW_PORT  # the code location builds its MLflow links from MLFLOW_PORT
VENV="$(cd "${VENV:-.venv}" && pwd)"  # absolute: dagster dev starts from DAGSTER_HOME
STOP_GRACE_S="${STOP_GRACE_S:-10}"
TERM_GRACE_S="${TERM_GRACE_S:-3}"
DAGSTER_LOG_LEVEL="${DAGSTER_LOG_LEVEL:-info}"  # warning: only problems (no sensor tick lines)
# the libraries' deprecation notices are for their developers, not for someone looking at the UIs
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::DeprecationWarning,ignore::FutureWarning,ignore:starlette.middleware.wsgi is deprecated:UserWarning,ignore:Handling yaml-defined logging configuration}"
PY="$VENV/bin/python"
# one planned event per asset for a run over a drop's range of partitions (locus_pipeline/instance.py RUN_CREATION_ENV)
export DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=true
export DAGSTER_HOME
DAGSTER_HOME=$($PY -c "from locus_pipeline.instance import prepare_dagster_home; print(prepare_dagster_home())")
mkdir -p "$LOCUS_HOME/mlflow/artifacts" "$LOCUS_HOME/incoming"
# a copied or moved home: its MLflow database's artifact locations (absolute URIs) and the Default experiment's
# follow it to this home's mlflow/artifacts before the MLflow UI reads them; the links between the two UIs stored
# by earlier runs (e.g. make demo's, made with the default ports) follow DAGSTER_PORT / MLFLOW_PORT. The home's
# ui.json records these ports: a process started in another shell (locus onboard) links to these servers too
$PY -c "
from locus_pipeline.defs.resources import MlflowTracking; from locus_pipeline.instance import relink_mlflow_links
from locus_pipeline.storage import LocusHome
home = LocusHome(); home.write_ui_config(dagster_url='http://127.0.0.1:$DAGSTER_PORT', mlflow_url='http://127.0.0.1:$MLFLOW_PORT')
tracking = MlflowTracking(home=home); tracking.relocate(); tracking.relink()
relink_mlflow_links('$DAGSTER_HOME', tracking.mlflow_ui_url)"

MLFLOW_PID="" DAGSTER_PID=""

alive() {  # is any process (not a zombie: a container's PID 1 may never reap them) left in the leader's group?
  [[ -n "$1" ]] && ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ {found = 1} END {exit !found}'
}

stop() {  # stop [grace seconds]
  trap - INT TERM EXIT
  local grace="${1:-$STOP_GRACE_S}"
  echo; echo "stopping dagster dev and the MLflow UI ..."
  if [[ -n "$DAGSTER_PID" ]]; then kill -INT -- "-$DAGSTER_PID" 2>/dev/null || true; fi
  if [[ -n "$MLFLOW_PID" ]]; then kill -TERM -- "-$MLFLOW_PID" 2>/dev/null || true; fi
  local deadline=$((SECONDS + grace))
  while (alive "$DAGSTER_PID" || alive "$MLFLOW_PID") && ((SECONDS < deadline)); do
    sleep 0.2
  done
  for pid in "$DAGSTER_PID" "$MLFLOW_PID"; do
    if alive "$pid"; then
      echo "process group $pid did not stop within ${grace} s: SIGKILL"
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
  done
  wait 2>/dev/null || true  # reap the jobs
  echo "stopped."
}
trap 'stop; exit 130' INT
trap 'stop "$TERM_GRACE_S"; exit 143' TERM
trap stop EXIT

# read before the servers start: bash runs a trap only after the foreground command it interrupts, and this import
# takes seconds on a loaded machine (a SIGTERM then waited for it)
DEMO_QUERIES=$($PY -c "from locus_pipeline.demo import DEMO_QUERIES; print(DEMO_QUERIES)")
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false "$VENV/bin/mlflow" server \
  --backend-store-uri "sqlite:///$LOCUS_HOME/mlflow/mlflow.db" \
  --default-artifact-root "$LOCUS_HOME/mlflow/artifacts" \
  --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1 --uvicorn-opts "--no-access-log --log-level warning" &
MLFLOW_PID=$!
# started from DAGSTER_HOME (where dagster.yaml is linked): from the repository root, dagster dev warns that the
# dagster.yaml "in the current folder" will not be used, though it is, through DAGSTER_HOME
REPO="$PWD"
(cd "$DAGSTER_HOME" && exec "$VENV/bin/dagster" dev -w "$REPO/workspace.yaml" -h 127.0.0.1 -p "$DAGSTER_PORT" \
  --log-level "$DAGSTER_LOG_LEVEL") &
DAGSTER_PID=$!

cat <<MSG

  Dagster UI   http://127.0.0.1:$DAGSTER_PORT   (DAGSTER_HOME=$DAGSTER_HOME)
               materialize locus_job; make demo's run sets evaluation_table max_queries: $DEMO_QUERIES in the
               launchpad (its default 0 = every question of the source: all 12,032 of MMLU-Pro)
  MLflow UI    http://127.0.0.1:$MLFLOW_PORT/#/experiments?workflowType=machine_learning   (experiment "locus")
  Drop folder  $LOCUS_HOME/incoming/            (new evaluation files are onboarded by the sensor)
  Ctrl-C stops both.

MSG
wait -n "$DAGSTER_PID" "$MLFLOW_PID" || true
