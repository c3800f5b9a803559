"""A client for colball's HTTP job API.

colball solves the colball puzzle exactly on a cluster. This package talks
to a coordinator's HTTP endpoint (``colball-server coordinator --http``):
it submits puzzle sets as durable jobs, reads their status and pace, and
streams their results, resuming where it was when a connection breaks.

    import colball

    client = colball.Client("http://127.0.0.1:8080", token="...")
    job = client.submit("puzzles.txt", priority="bulk", name="round 2")
    for result in client.results(job):
        print(result.id, result.moves, result.solution)

The API's contract is the OpenAPI document the coordinator serves at
``/api/v1/openapi.json``.
"""

from ._client import (
    BadRequest,
    Client,
    ColballError,
    ConnectionLost,
    Job,
    NotFound,
    Puzzle,
    QuotaExceeded,
    Result,
    StoreFull,
    Submission,
    TooLarge,
    Unauthorized,
    Unavailable,
    WebhookStatus,
)

__all__ = [
    "BadRequest",
    "Client",
    "ColballError",
    "ConnectionLost",
    "Job",
    "NotFound",
    "Puzzle",
    "QuotaExceeded",
    "Result",
    "StoreFull",
    "Submission",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "WebhookStatus",
]
