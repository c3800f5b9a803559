"""A real cluster for the client's tests: a coordinator and a worker started
from the binaries in COLBALL_SERVER_BIN (the Rust test that runs this suite
sets it; else the workspace's debug build), on loopback ports the system
picks, stopped by their PIDs at the end."""

from __future__ import annotations

import base64
import os
import pathlib
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Iterator, List, Optional

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SERVER = os.environ.get("COLBALL_SERVER_BIN", str(ROOT / "target" / "debug" / "colball-server"))
CLIENT = os.environ.get("COLBALL_CLIENT_BIN", str(ROOT / "target" / "debug" / "colball"))
EXAMPLES = ROOT / "docs" / "examples"
TOKENS = {"alice": "alice-token", "bob": "bob-token"}


@dataclass
class Coordinator:
    process: subprocess.Popen
    grpc: str
    http: str

    def stop(self) -> None:
        stop(self.process)


def stop(process: subprocess.Popen) -> None:
    """Stops a process the tests started, by its PID."""
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)


def start_coordinator(args: List[str], env: Optional[dict] = None) -> Coordinator:
    process = subprocess.Popen(
        [SERVER, "coordinator", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        env={**os.environ, "RUST_LOG": "warn", **(env or {})},
    )
    grpc = http = None
    assert process.stdout is not None
    while grpc is None or http is None:
        line = process.stdout.readline()
        if not line:
            stop(process)
            raise RuntimeError(f"{SERVER} coordinator exited before it listened")
        if line.startswith("listening "):
            grpc = "http://" + line.split()[1]
        elif line.startswith("http "):
            http = "http://" + line.split()[1]
    return Coordinator(process, grpc, http)


def start_worker(grpc: str, name: str = "py") -> subprocess.Popen:
    return subprocess.Popen(
        [SERVER, "worker", "--coordinator", grpc, "--threads", "1", "--name", name],
        stdout=subprocess.DEVNULL,
        stderr=sys.stderr,
        env={**os.environ, "RUST_LOG": "error"},
    )


@pytest.fixture(scope="session")
def tokens_file() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="colball-py-") as d:
        path = os.path.join(d, "tokens")
        with open(path, "w") as f:
            for name, token in TOKENS.items():
                f.write(f"{name} {token}\n")
        yield path


#: The URLs the test cluster's jobs may name as webhooks.
WEBHOOK_ALLOWED = "http://127.0.0.1:9/*"


@pytest.fixture(scope="session")
def cluster(tokens_file: str) -> Iterator[Coordinator]:
    """A coordinator with named client tokens and one worker."""
    with tempfile.TemporaryDirectory(prefix="colball-py-data-") as data:
        secret = os.path.join(data, "webhook-secret")
        with open(secret, "w") as f:
            f.write("whsec_" + base64.b64encode(os.urandom(32)).decode() + "\n")
        coordinator = start_coordinator(
            [
                "--client-tokens-file",
                tokens_file,
                "--data-dir",
                data,
                # Webhooks to a loopback port nothing listens on: calls
                # are made, fail and are tried again.
                "--webhook-allow",
                WEBHOOK_ALLOWED,
                "--webhook-secret-file",
                secret,
            ]
        )
        worker = start_worker(coordinator.grpc)
        try:
            yield coordinator
        finally:
            stop(worker)
            coordinator.stop()


def generated(directory: pathlib.Path, count: int = 300, seed: int = 5) -> pathlib.Path:
    """A file of `count` random puzzles of the sizes up to 3x4, from `colball gen`."""
    path = directory / f"gen-{count}-{seed}.in"
    with open(path, "wb") as f:
        subprocess.run(
            [CLIENT, "gen", "--size", "2x2,2x3,3x3,3x4", "--count", str(count), "--seed", str(seed)],
            check=True,
            stdout=f,
        )
    return path


def in_process(path: pathlib.Path) -> List[str]:
    """What `colball solve` prints for a file, solving in-process."""
    out = subprocess.run(
        [CLIENT, "-q", "solve", "--output", "classic", str(path)], check=True, capture_output=True, text=True
    )
    return out.stdout.splitlines()
