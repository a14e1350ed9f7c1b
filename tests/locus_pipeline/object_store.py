"""A local S3 endpoint for tests: moto's server on a free port, with the AWS variables that point boto3, s3fs
and MLflow at it (nothing reaches the network)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

BUCKET = "locus-test"


@contextmanager
def s3_endpoint(bucket: str = BUCKET) -> Iterator[dict[str, str]]:
    """Start moto's S3 server (in this process, reachable from subprocesses), create ``bucket``; yields the
    environment variables a client process needs, which are also set in this process while it runs."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "MLFLOW_S3_ENDPOINT_URL": f"http://{host}:{port}",
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()  # a cached filesystem would still point at an earlier endpoint
    try:
        import boto3

        boto3.client("s3").create_bucket(Bucket=bucket)
        yield env
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        S3FileSystem.clear_instance_cache()
        server.stop()
