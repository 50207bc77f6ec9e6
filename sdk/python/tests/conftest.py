"""Fixtures of the SDK's tests.

The tests marked ``cluster`` need a running kruntimes: TestPythonSDK
(test/e2e/sdk_python_test.go) starts one and passes it in KRUNTIMES_TEST_*
variables. Without them those tests skip, unless KRUNTIMES_TEST_REQUIRE=1.
"""

from __future__ import annotations

import os
import pathlib
import time
import uuid
from typing import Callable

import pytest

import kruntimes
from kruntimes.sandbox import runtimes_path

HANDLERS = '''import json, os, time

def echo(event, context):
    print("echo says hi")
    return {"echo": event, "greeting": os.environ.get("GREETING"), "invocation": context.invocation_id}

def boom(event, context):
    raise ValueError("no good")

def record(event, context):
    # One line per execution: the tests count how often the handler ran.
    with open(event["file"], "a") as f:
        f.write(context.invocation_id + "\\n")
    time.sleep(event.get("sleep", 0))
    return "recorded"
'''


def env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        if os.environ.get("KRUNTIMES_TEST_REQUIRE") == "1":
            pytest.fail(f"{name} is not set, and KRUNTIMES_TEST_REQUIRE=1")
        pytest.skip(f"{name} is not set: run through TestPythonSDK (test/e2e)")
    return value


@pytest.fixture(scope="session")
def namespace() -> str:
    return env("KRUNTIMES_TEST_NAMESPACE")


@pytest.fixture(scope="session")
def client(namespace: str) -> kruntimes.Client:
    c = kruntimes.Client(namespace=namespace, kubeconfig=env("KRUNTIMES_TEST_KUBECONFIG"))
    yield c
    c.close()


@pytest.fixture(scope="session")
def python_runtime() -> str:
    return env("KRUNTIMES_TEST_PYTHON_RUNTIME")


@pytest.fixture(scope="session")
def bash_runtime() -> str:
    return env("KRUNTIMES_TEST_BASH_RUNTIME")


@pytest.fixture(scope="session")
def handlers(client: kruntimes.Client, python_runtime: str) -> kruntimes.Function:
    """One Ready function serving HANDLERS.record (shared: tests that need it
    idle take turns, pytest runs them one at a time)."""
    fn = client.functions.create(generate_name="record-", runtime=python_runtime, source=HANDLERS,
                                 path="handlers.py", handler="handlers.record")
    fn.wait_ready(timeout=90)
    yield fn
    fn.delete()


@pytest.fixture(scope="session")
def sandbox_runtime(client: kruntimes.Client, python_runtime: str) -> str:
    """A Runtime of capacity 1 (a Pod per sandbox): KRUNTIMES_TEST_SANDBOX_RUNTIME
    when the harness made one, else a copy of the Python Runtime with
    capacity.runs 1, deleted at the end."""
    given = os.environ.get("KRUNTIMES_TEST_SANDBOX_RUNTIME")
    if given:
        yield given
        return
    transport = client._transport
    source = transport.call("GET", runtimes_path(client.namespace, python_runtime))
    name = f"sandbox-{uuid.uuid4().hex[:6]}"
    spec = dict(source["spec"], replicas=1, capacity={"runs": 1})
    transport.call("POST", runtimes_path(client.namespace),
                   obj={"apiVersion": "kruntimes.io/v1alpha1", "kind": "Runtime", "metadata": {"name": name}, "spec": spec})
    yield name
    transport.call("DELETE", runtimes_path(client.namespace, name))


@pytest.fixture
def counter(tmp_path: pathlib.Path) -> "Counter":
    return Counter(tmp_path / f"ran-{uuid.uuid4().hex[:8]}")


class Counter:
    """A file the ``record`` handler appends each execution's invocation ID to."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    def ids(self) -> list[str]:
        try:
            return self.path.read_text().split()
        except FileNotFoundError:
            return []

    def wait_for(self, n: int, timeout: float = 30.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ids = self.ids()
            if len(ids) >= n:
                return ids
            time.sleep(0.02)
        raise AssertionError(f"{self.path} has {self.ids()} after {timeout}s, want {n} executions")


def poll(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout}s")
