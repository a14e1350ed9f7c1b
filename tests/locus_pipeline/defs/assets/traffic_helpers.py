"""Graded traffic on a home: requests routed and graded through a gateway (the traffic and automation tests)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from locus_pipeline.serve import ServeConfig, create_app


def graded_traffic(home: Path, n: int) -> dict[str, int]:
    """Route n distinct queries through a gateway on the home, grade every answer 1 (the model keeps the traffic);
    answers per model."""
    app = create_app(ServeConfig(home=str(home), explore=0.0, poll_seconds=0.05))
    answered: dict[str, int] = {}
    with TestClient(app) as client:
        for i in range(n):
            r = client.post("/route", json={"query": f"traffic question {i}: what is {i} times {i + 1}?"})
            answered[r.json()["chosen"]] = answered.get(r.json()["chosen"], 0) + 1
            assert (
                client.post(
                    "/v1/outcomes", json={"request_id": r.headers["x-locus-request-id"], "score": 1.0}
                ).status_code
                == 202
            )
    return answered
