#!/usr/bin/env bash
# make dev: dagster dev (webserver + daemon) and the MLflow UI on 127.0.0.1, stopped together on Ctrl-C.
set -euo pipefail
set -m  # each background job gets its own process group: dagster dev ignores SIGINT otherwise (stack.md)
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export LOCUS_HOME="${LOCUS_HOME:-$PWD/data}"
DAGSTER_PORT="${DAGSTER_PORT:-3000}"
MLFLOW_PORT="${MLFLOW_PORT:-5000}"
PY=.venv/bin/python
export DAGSTER_HOME
DAGSTER_HOME=$($PY -c "from locus_pipeline.instance import prepare_dagster_home; print(prepare_dagster_home())")
mkdir -p "$LOCUS_HOME/mlflow/artifacts" "$LOCUS_HOME/incoming"

MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false .venv/bin/mlflow server \
  --backend-store-uri "sqlite:///$LOCUS_HOME/mlflow/mlflow.db" \
  --default-artifact-root "$LOCUS_HOME/mlflow/artifacts" \
  --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1 &
MLFLOW_PID=$!
.venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p "$DAGSTER_PORT" &
DAGSTER_PID=$!

stop() {
  trap - INT TERM EXIT
  echo; echo "stopping dagster dev and the MLflow UI ..."
  kill -INT -- "-$DAGSTER_PID" 2>/dev/null || true
  kill -TERM -- "-$MLFLOW_PID" 2>/dev/null || true
  wait "$DAGSTER_PID" 2>/dev/null || true
  wait "$MLFLOW_PID" 2>/dev/null || true
  echo "stopped."
}
trap stop INT TERM EXIT

cat <<MSG

  Dagster UI   http://127.0.0.1:$DAGSTER_PORT   (materialize locus_job; DAGSTER_HOME=$DAGSTER_HOME)
  MLflow UI    http://127.0.0.1:$MLFLOW_PORT   (experiment "locus")
  Drop folder  $LOCUS_HOME/incoming/            (new evaluation files are onboarded by the sensor)
  Ctrl-C stops both.

MSG
wait -n "$DAGSTER_PID" "$MLFLOW_PID" || true
