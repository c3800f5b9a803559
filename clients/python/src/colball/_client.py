"""The client itself: see the package's documentation."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import (
    IO,
    Any,
    Dict,
    Iterable,
    Iterator,
    Mapping,
    Optional,
    Sequence,
    Type,
    Union,
)

import httpx

try:  # When the application uses OpenTelemetry, its calls join its traces.
    from opentelemetry import propagate as _propagate
except ImportError:  # pragma: no cover - OpenTelemetry is optional
    _propagate = None

#: Job states after which nothing changes.
FINISHED = frozenset({"done", "cancelled", "failed"})


class ColballError(Exception):
    """The coordinator refused a call: its HTTP status and its message.

    ``retry_after`` is the wait the coordinator asked for (seconds), when
    it gave one (a quota's refusal does).
    """

    def __init__(self, status: int, message: str, retry_after: Optional[float] = None):
        super().__init__(f"{message} (HTTP {status})" if status else message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


class BadRequest(ColballError):
    """400: the puzzles or the parameters do not parse (the message says where)."""


class Unauthorized(ColballError):
    """401: the coordinator wants a client token, and this one is missing or wrong."""


class NotFound(ColballError):
    """404: no such job of this client's."""


class TooLarge(ColballError):
    """413: more puzzles than the coordinator takes in one job."""


class QuotaExceeded(ColballError):
    """429: over one of this client's quotas (the message names it)."""


class Unavailable(ColballError):
    """503: the coordinator is shutting down or its job store is unavailable."""


class StoreFull(ColballError):
    """507: the coordinator's job store is full."""


class ConnectionLost(ColballError):
    """The coordinator could not be reached (or went away) for too long."""


_ERRORS: Dict[int, Type[ColballError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    413: TooLarge,
    429: QuotaExceeded,
    503: Unavailable,
    507: StoreFull,
}


@dataclass(frozen=True)
class Puzzle:
    """A puzzle: the start and target boards as rows of colour letters."""

    start: Sequence[str]
    target: Sequence[str]
    id: Optional[str] = None

    def to_json(self) -> str:
        record: Dict[str, Any] = {"start": list(self.start), "target": list(self.target)}
        if self.id is not None:
            record["id"] = self.id
        return json.dumps(record)


@dataclass(frozen=True)
class Submission:
    """A job accepted: its id and size, and whether it outlives the coordinator."""

    id: str
    puzzles: int
    durable: bool


@dataclass(frozen=True)
class Job:
    """A job's status: its state, counts, times and pace."""

    id: str
    name: str
    state: str
    puzzles: int
    solved: int
    errors: int
    remaining: int
    created_unix_ms: int
    finished_unix_ms: int
    failure: str
    any_order: bool
    #: Results per second, recently (see the API's document).
    rate: float
    #: When the job should end at that rate (ms since the epoch), 0 when unknown.
    eta_unix_ms: int
    #: How the call to its webhook stands, if it names one.
    webhook: Optional[WebhookStatus] = None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def eta(self) -> Optional[float]:
        """Seconds from now until the estimated end, or None when unknown."""
        if self.finished:
            return 0.0
        if self.eta_unix_ms <= 0:
            return None
        return max(0.0, self.eta_unix_ms / 1000.0 - time.time())


@dataclass(frozen=True)
class WebhookStatus:
    """How the call to a job's webhook stands."""

    url: str
    #: Calls made so far.
    attempts: int
    #: A call was answered with a 2xx status.
    delivered: bool
    #: When the next call is due (ms since the epoch); 0 when none is.
    next_unix_ms: int


@dataclass(frozen=True)
class Result:
    """One puzzle's result: its answer, or why it has none.

    ``moves`` is the minimum number of moves (-1 when the target cannot be
    reached), and ``solution`` one optimal move sequence; for a puzzle
    without an answer, ``moves`` is None and ``error`` says why.
    """

    id: str
    moves: Optional[int]
    solution: str = ""
    strategy: str = ""
    time_us: int = 0
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None


JobRef = Union[str, Submission, Job]
PuzzleSource = Union[str, "os.PathLike[str]", bytes, IO[bytes], Iterable[Union[Puzzle, Mapping[str, Any]]]]


def _trace_context(request: httpx.Request) -> None:
    """Adds the current span's trace context (``traceparent``, and
    ``tracestate``) to a call, when OpenTelemetry is installed: the
    coordinator's spans for the call, and a job's whole run, join the
    caller's trace."""
    if _propagate is not None:
        _propagate.inject(request.headers)


def _job_id(job: JobRef) -> str:
    return job if isinstance(job, str) else job.id


class Client:
    """A coordinator's HTTP job API.

    ``url`` is the coordinator's HTTP address (its ``--http`` endpoint, for
    example ``http://127.0.0.1:8080``); ``token`` a client token, when the
    coordinator asks for one. ``reconnect`` bounds, in seconds, how long
    reads keep trying to reach a coordinator that went away.
    """

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        *,
        timeout: float = 30.0,
        reconnect: float = 30.0,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        headers = {"User-Agent": "colball-python/0.1"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout, read=None),
            transport=transport,
            event_hooks={"request": [_trace_context]},
        )
        self.reconnect = reconnect

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(
        self,
        puzzles: PuzzleSource,
        *,
        priority: str = "bulk",
        name: str = "",
        any_order: bool = False,
        webhook: Optional[str] = None,
    ) -> Submission:
        """Stores a puzzle set as a job and returns once every puzzle is stored.

        ``puzzles`` is a file's path (classic or JSON Lines, as ``colball
        solve`` reads), its bytes, an open binary file, or an iterable of
        :class:`Puzzle` (or dicts with ``start``, ``target`` and an optional
        ``id``). It is sent as it is read. ``priority`` is ``interactive``,
        ``normal`` or ``bulk``; with ``any_order`` results come in the order
        they are solved. ``webhook`` is a URL the coordinator calls (a POST
        signed as Standard Webhooks signs calls) once the job finishes; it
        must match one of the coordinator's ``--webhook-allow`` patterns.
        """
        params = {"priority": priority, "name": name, "order": "any" if any_order else "input"}
        if webhook:
            params["webhook"] = webhook
        if isinstance(puzzles, (str, os.PathLike)):
            with open(puzzles, "rb") as f:
                response = self._http.post("/api/v1/jobs", params=params, content=_chunks(f))
        elif isinstance(puzzles, bytes):
            response = self._http.post("/api/v1/jobs", params=params, content=puzzles)
        elif hasattr(puzzles, "read"):
            response = self._http.post("/api/v1/jobs", params=params, content=_chunks(puzzles))  # type: ignore[arg-type]
        else:
            response = self._http.post("/api/v1/jobs", params=params, content=_json_lines(puzzles))  # type: ignore[arg-type]
        body = _checked(response)
        return Submission(id=body["id"], puzzles=body["puzzles"], durable=body["durable"])

    def status(self, job: JobRef) -> Job:
        """The job's state, counts and pace."""
        return _job(self._call("GET", f"/api/v1/jobs/{_job_id(job)}"))

    def jobs(self) -> list:
        """This client's jobs, newest first."""
        return [_job(j) for j in self._call("GET", "/api/v1/jobs")]

    def cancel(self, job: JobRef) -> Job:
        """Cancels the job unless it has finished; the job as it is now."""
        return _job(self._call("POST", f"/api/v1/jobs/{_job_id(job)}/cancel"))

    def delete(self, job: JobRef) -> None:
        """Deletes the job and its results (cancelling it first if it runs)."""
        self._call("DELETE", f"/api/v1/jobs/{_job_id(job)}")

    def wait(self, job: JobRef, *, poll: float = 0.5, timeout: Optional[float] = None) -> Job:
        """Waits until the job has finished (done, cancelled or failed) and returns it.

        Raises TimeoutError after ``timeout`` seconds, if given.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status(job)
            if status.finished:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {status.id} is still {status.state} after {timeout} s")
            time.sleep(poll)

    def results(self, job: JobRef, from_: int = 0, wait: bool = True) -> Iterator[Result]:
        """The job's results from number ``from_`` on, in input order (or, for
        a job submitted with ``any_order``, the order they were solved).

        With ``wait`` it follows the job until it ends; without, it gives
        what is stored now. When the connection breaks it reconnects (for up
        to ``reconnect`` seconds) and goes on from the next result due:
        nothing is given twice or skipped.
        """
        job_id = _job_id(job)
        following = "true" if wait else "false"
        lost_since: Optional[float] = None
        pause = 0.1
        while True:
            params = {"from": str(from_), "follow": following}
            try:
                with self._http.stream("GET", f"/api/v1/jobs/{job_id}/results", params=params) as response:
                    if response.status_code != 200:
                        response.read()
                        _checked(response)
                    lost_since, pause = None, 0.1
                    for line in response.iter_lines():
                        if not line:
                            continue
                        record = json.loads(line)
                        if "line" not in record and "moves" not in record:
                            raise ColballError(0, f"job {job_id}: {record.get('error', line)}")
                        from_ += 1
                        yield _result(record)
                    return
            except (httpx.TransportError, httpx.RemoteProtocolError) as e:
                now = time.monotonic()
                lost_since = lost_since if lost_since is not None else now
                if now - lost_since >= self.reconnect:
                    raise ConnectionLost(
                        0,
                        f"lost the coordinator at result {from_} of job {job_id} for {self.reconnect:.0f} s: {e}",
                    ) from e
                time.sleep(pause)
                pause = min(pause * 2, 2.0)

    def _call(self, method: str, path: str) -> Any:
        """A call that changes nothing twice: retried while the coordinator
        cannot be reached, for up to ``reconnect`` seconds."""
        began = time.monotonic()
        pause = 0.1
        while True:
            try:
                return _checked(self._http.request(method, path))
            except httpx.TransportError as e:
                if time.monotonic() - began >= self.reconnect:
                    raise ConnectionLost(0, f"cannot reach the coordinator: {e}") from e
                time.sleep(pause)
                pause = min(pause * 2, 2.0)


def _chunks(f: IO[bytes], size: int = 1 << 16) -> Iterator[bytes]:
    while True:
        chunk = f.read(size)
        if not chunk:
            return
        yield chunk


def _json_lines(puzzles: Iterable[Union[Puzzle, Mapping[str, Any]]]) -> Iterator[bytes]:
    batch = []
    for p in puzzles:
        batch.append(p.to_json() if isinstance(p, Puzzle) else json.dumps(dict(p)))
        if len(batch) >= 1024:
            yield ("\n".join(batch) + "\n").encode()
            batch = []
    if batch:
        yield ("\n".join(batch) + "\n").encode()


def _checked(response: httpx.Response) -> Any:
    """The body of a success; the error it says otherwise."""
    if response.is_success:
        return response.json() if response.content else None
    try:
        message = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        message = response.text or response.reason_phrase
    retry_after = response.headers.get("Retry-After")
    cls = _ERRORS.get(response.status_code, ColballError)
    raise cls(
        response.status_code,
        message,
        float(retry_after) if retry_after and retry_after.isdigit() else None,
    )


def _job(body: Mapping[str, Any]) -> Job:
    fields = {field: body[field] for field in Job.__dataclass_fields__ if field != "webhook"}
    hook = body.get("webhook")
    webhook = WebhookStatus(**{f: hook[f] for f in WebhookStatus.__dataclass_fields__}) if hook else None
    return Job(**fields, webhook=webhook)


def _result(record: Mapping[str, Any]) -> Result:
    if "moves" in record:
        return Result(
            id=record["id"],
            moves=record["moves"],
            solution=record["solution"],
            strategy=record["strategy"],
            time_us=record["time_us"],
        )
    return Result(id=record.get("id", ""), moves=None, error=record["error"])
