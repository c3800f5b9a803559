"""The client against a real coordinator and worker (see conftest.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from typing import List

import httpx
import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

import colball
from conftest import CLIENT, EXAMPLES, TOKENS, generated, in_process


def client(cluster, name: str = "alice", **kw) -> colball.Client:
    return colball.Client(cluster.http, token=TOKENS[name], **kw)


def moves(results: List[colball.Result]) -> List[str]:
    return [str(r.moves) if r.ok else "error" for r in results]


def test_a_file_s_results_equal_the_in_process_answers(cluster, tmp_path):
    path = generated(tmp_path)
    expected = in_process(path)
    with client(cluster) as c:
        job = c.submit(path, name="uniform", priority="normal")
        assert job.puzzles == len(expected) and job.durable
        results = list(c.results(job))
        assert moves(results) == expected
        assert [r.id for r in results] == [str(i + 1) for i in range(len(expected))]
        assert all(r.solution.count(" ") + 1 == r.moves for r in results if r.moves and r.moves > 0)
        done = c.wait(job, timeout=60)
        assert (done.state, done.solved, done.errors, done.remaining) == ("done", len(expected), 0, 0)
        assert done.name == "uniform" and done.finished and done.eta == 0.0
        assert done.rate > 0 and done.finished_unix_ms >= done.created_unix_ms
        # From the middle, without waiting: the tail alone.
        tail = list(c.results(job.id, from_=len(expected) - 3, wait=False))
        assert moves(tail) == expected[-3:]
        assert job.id in [j.id for j in c.jobs()]


def test_puzzles_given_as_objects_are_sent_as_json_lines(cluster, tmp_path):
    puzzles = [
        colball.Puzzle(start=["BB", "BR"], target=["BB", "RR"], id="a"),
        {"id": "b", "start": ["RGB", "BBR"], "target": ["GRB", "BRB"]},
        colball.Puzzle(start=["RR", "RR"], target=["RR", "RR"]),
    ]
    file = tmp_path / "puzzles.jsonl"
    file.write_text("".join(colball.Puzzle(**p).to_json() + "\n" if isinstance(p, dict) else p.to_json() + "\n" for p in puzzles))
    expected = dict(zip(["a", "b", "3"], in_process(file)))
    with client(cluster) as c:
        job = c.submit(puzzles, priority="interactive", any_order=True)
        results = {r.id: str(r.moves) for r in c.results(job)}
    assert results == expected


def test_every_result_matches_the_documented_schema(cluster):
    document = httpx.get(cluster.http + "/api/v1/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    registry = Registry().with_resource("urn:colball", Resource.from_contents(document, default_specification=DRAFT202012))
    schema = {"$ref": "urn:colball#/components/schemas/ResultRecord"}
    path = EXAMPLES / "sample.in"
    with client(cluster) as c:
        job = c.submit(path)
        c.wait(job, timeout=60)
        response = httpx.get(
            f"{cluster.http}/api/v1/jobs/{job.id}/results",
            headers={"Authorization": f"Bearer {TOKENS['alice']}"},
        )
        status = httpx.get(
            f"{cluster.http}/api/v1/jobs/{job.id}",
            headers={"Authorization": f"Bearer {TOKENS['alice']}"},
        ).json()
    records = [json.loads(line) for line in response.text.splitlines()]
    assert len(records) == len(in_process(path))
    for record in records:
        jsonschema.validate(record, schema, registry=registry)
    job_schema = {"$ref": "urn:colball#/components/schemas/Job"}
    jsonschema.validate(status, job_schema, registry=registry)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"id": "1", "moves": "three"}, schema, registry=registry)


def test_errors_carry_the_server_s_message(cluster):
    with client(cluster) as c:
        with pytest.raises(colball.BadRequest) as bad:
            c.submit(b"2 2\nBB\nBX\nBB\nRR\n")
        assert "line 3" in bad.value.message and bad.value.status == 400
        with pytest.raises(colball.NotFound) as missing:
            c.status("j1-000000000000")
        assert "j1-000000000000" in str(missing.value)
        with pytest.raises(colball.BadRequest) as priority:
            c.submit([colball.Puzzle(["R"], ["R"])], priority="urgent")
        assert "priority" in priority.value.message
        job = c.submit(EXAMPLES / "sample.in")
    # Another client sees nothing of it, and cannot delete it.
    with client(cluster, "bob") as bob:
        with pytest.raises(colball.NotFound):
            bob.status(job)
        with pytest.raises(colball.NotFound):
            bob.delete(job)
    with colball.Client(cluster.http, token="wrong") as stranger:
        with pytest.raises(colball.Unauthorized):
            stranger.jobs()


def test_a_job_names_a_webhook_and_its_status_shows_the_calls(cluster):
    with client(cluster) as c:
        with pytest.raises(colball.BadRequest) as refused:
            c.submit(EXAMPLES / "sample.in", webhook="https://example.com/hook")
        assert "--webhook-allow" in refused.value.message
        plain = c.wait(c.submit(EXAMPLES / "sample.in"))
        assert plain.webhook is None
        job = c.wait(c.submit(EXAMPLES / "sample.in", webhook="http://127.0.0.1:9/hook"))
        assert job.state == "done"
        assert isinstance(job.webhook, colball.WebhookStatus)
        assert job.webhook.url == "http://127.0.0.1:9/hook"
        # Nothing listens there: the first call fails and another is due.
        deadline = time.time() + 30
        while c.status(job).webhook.attempts == 0:
            assert time.time() < deadline, c.status(job)
            time.sleep(0.1)
        hook = c.status(job).webhook
        assert not hook.delivered and hook.next_unix_ms > 0


def test_cancel_and_delete(cluster):
    # 2,000 4x4 puzzles: far more than one worker thread solves at once.
    puzzles = subprocess.run(
        [CLIENT, "gen", "--size", "4x4", "--count", "2000", "--seed", "7"],
        check=True,
        capture_output=True,
    ).stdout
    with client(cluster) as c:
        job = c.submit(puzzles, priority="bulk")
        cancelled = c.cancel(job)
        assert cancelled.state == "cancelled"
        after = c.wait(job, timeout=30)
        assert after.state == "cancelled" and after.remaining > 0
        c.delete(job)
        with pytest.raises(colball.NotFound):
            c.status(job)
        assert job.id not in [j.id for j in c.jobs()]


class CuttingProxy:
    """A loopback TCP proxy to the coordinator that cuts each of its first
    `cuts` connections after `after` bytes of the answer."""

    def __init__(self, target: str, cuts: int, after: int):
        host, port = target.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.cuts, self.after = cuts, after
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.server.getsockname()[1]
        self.cut = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                downstream, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            limit = self.after if self.cut < self.cuts else None
            self.cut += 1
            threading.Thread(target=self.pipe, args=(downstream, upstream, None), daemon=True).start()
            threading.Thread(target=self.pipe, args=(upstream, downstream, limit), daemon=True).start()

    @staticmethod
    def pipe(src: socket.socket, dst: socket.socket, limit) -> None:
        sent = 0
        try:
            while limit is None or sent < limit:
                data = src.recv(min(4096, limit - sent) if limit else 4096)
                if not data:
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.server.close()


def test_results_resume_after_a_broken_connection(cluster, tmp_path):
    path = generated(tmp_path, seed=6)
    expected = in_process(path)
    with client(cluster) as c:
        job = c.submit(path)
        c.wait(job, timeout=60)
    # Each of the first three connections breaks after 1,500 bytes, a few
    # results into the answer (and mid-line).
    proxy = CuttingProxy(cluster.http, cuts=3, after=1500)
    try:
        with colball.Client(proxy.url, token=TOKENS["alice"], reconnect=10) as c:
            results = list(c.results(job))
    finally:
        proxy.close()
    assert proxy.cut >= 4, "the connection was cut and taken up again"
    assert moves(results) == expected
    assert [r.id for r in results] == [str(i + 1) for i in range(len(expected))]


def test_a_coordinator_that_is_gone_is_a_clear_error():
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    with colball.Client(f"http://127.0.0.1:{port}", reconnect=0.3) as c:
        with pytest.raises(colball.ConnectionLost) as lost:
            list(c.results("j1-000000000000"))
    assert "j1-000000000000" in str(lost.value)


def test_calls_carry_the_caller_s_trace_context():
    """With OpenTelemetry in use, each call carries the current span's
    ``traceparent``; outside any span, none."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("traceparent"))
        return httpx.Response(200, json=[])

    tracer = TracerProvider().get_tracer("test")
    with colball.Client("http://coordinator.invalid", transport=httpx.MockTransport(answer)) as c:
        c.jobs()
        with tracer.start_as_current_span("caller") as span:
            c.jobs()
            ids = span.get_span_context()
    assert seen[0] is None
    assert seen[1] == f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{int(ids.trace_flags):02x}"
