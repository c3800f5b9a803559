"""A job end to end through the Python client openapi-python-client
generates from the served OpenAPI document, as a new user would use it:
submit in JSON, status, results, cancel and delete.

python_e2e.py PACKAGE_DIR BASE_URL CASES_JSON
CASES_JSON holds {"puzzles": [{"id", "start", "target"}...], "answers": [...],
"slow": [...]} (slow: 4x4 puzzles that keep a job running to cancel it).
"""

import json
import sys
import time

sys.path.insert(0, sys.argv[1])

from colball_generated import Client  # noqa: E402
from colball_generated.api.jobs import cancel, delete, list_, results, status, submit  # noqa: E402
from colball_generated.models import ApiError, JobSubmission, Priority, PuzzleRecord, State  # noqa: E402

base, cases = sys.argv[2], json.load(open(sys.argv[3]))
client = Client(base_url=base, raise_on_unexpected_status=True, timeout=60)


def records(puzzles):
    return [PuzzleRecord(start=p["start"], target=p["target"], id=p["id"]) for p in puzzles]


def wait_for(job_id, states, limit=120):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        job = status.sync(job_id, client=client)
        assert not isinstance(job, ApiError), job
        if job.state in states:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never reached {states}")


# Submit in JSON, with options, through the generated model.
body = JobSubmission(puzzles=records(cases["puzzles"]), priority=Priority.NORMAL, name="generated")
accepted = submit.sync(client=client, body=body)
assert not isinstance(accepted, ApiError), accepted
assert accepted.puzzles == len(cases["puzzles"]), accepted
job = wait_for(accepted.id, {State.DONE})
assert job.name == "generated" and job.solved + job.errors == accepted.puzzles, job

# Results: the NDJSON body, read whole by a client that cannot stream.
text = results.sync(accepted.id, client=client, follow=True)
assert isinstance(text, str), text
lines = [json.loads(line) for line in text.splitlines() if line]
assert [r["id"] for r in lines] == [p["id"] for p in cases["puzzles"]], lines[:3]
assert [r["moves"] for r in lines] == cases["answers"], lines[:3]

# A bad record is refused, naming its index and field, as an ApiError.
bad = JobSubmission(puzzles=records(cases["puzzles"][:2]) + [PuzzleRecord(start=["RB", "GQ"], target=["RB", "GR"])])
refused = submit.sync_detailed(client=client, body=bad)
assert refused.status_code == 400, refused
assert "puzzles[2]: field start" in refused.parsed.error, refused.parsed

# Cancel a job still running, then delete it: gone.
slow = submit.sync(client=client, body=JobSubmission(puzzles=records(cases["slow"]), priority=Priority.BULK))
assert not isinstance(slow, ApiError), slow
cancelled = cancel.sync(slow.id, client=client)
assert cancelled.state in {State.CANCELLED, State.DONE}, cancelled
assert slow.id in [j.id for j in list_.sync(client=client)]
gone = delete.sync_detailed(slow.id, client=client)
assert gone.status_code == 204, gone
assert status.sync_detailed(slow.id, client=client).status_code == 404
print("generated python client: ok")
