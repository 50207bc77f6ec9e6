"""The SDK sends an invocation at most once, whatever breaks after sending.

A loopback HTTP server stands in for the API server so that answers no
healthy cluster gives on demand (a connection dropped after the request was
read, a proxy's plain-text 503) can be provoked; it counts every request it
receives. The same is proven against the real cluster, with the handler
counting its executions, in test_functions.py.
"""

from __future__ import annotations

import json
import pathlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

import pytest

import kruntimes
from kruntimes.functions import Function

Reply = Callable[[BaseHTTPRequestHandler, int], None]


class FakeAPIServer:
    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                outer.reply(self, len(outer.requests))

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def send(handler: BaseHTTPRequestHandler, code: int, body: bytes, content_type: str = "application/json",
         headers: dict[str, str] | None = None) -> None:
    handler.send_response(code)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for k, v in (headers or {}).items():
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(body)


def status(code: int, reason: str, message: str, retry_after: int | None = None) -> bytes:
    st: dict = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
                "message": message}
    if retry_after:
        st["details"] = {"retryAfterSeconds": retry_after}
    return json.dumps(st).encode()


def ok(handler: BaseHTTPRequestHandler) -> None:
    send(handler, 200, json.dumps({"kind": "InvokeResult", "invocationId": handler.headers["X-Kruntime-Invocation-ID"],
                                   "output": "done", "durationMillis": 3}).encode(),
         headers={"X-Kruntime-Invocation-ID": handler.headers["X-Kruntime-Invocation-ID"]})


def drop(handler: BaseHTTPRequestHandler) -> None:
    # The request was read in full; the connection breaks without an answer.
    handler.connection.shutdown(socket.SHUT_RDWR)
    handler.close_connection = True


@pytest.fixture
def fake(tmp_path: pathlib.Path, request: pytest.FixtureRequest):
    servers: list[FakeAPIServer] = []

    def start(reply: Reply) -> tuple[FakeAPIServer, Function]:
        server = FakeAPIServer(reply)
        servers.append(server)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
            "users": [{"name": "u", "user": {"token": "secret-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": "team"}}],
        }))
        client = kruntimes.Client(kubeconfig=str(kubeconfig))
        assert client.namespace == "team", "the namespace comes from the kubeconfig's context"
        fn = Function(client, {"metadata": {"name": "fn", "namespace": client.namespace, "uid": "uid-1"}})
        return server, fn

    yield start
    for s in servers:
        s.close()


def test_a_dropped_connection_after_sending_is_outcome_unknown_and_not_resent(fake) -> None:
    server, fn = fake(lambda h, n: drop(h))
    with pytest.raises(kruntimes.OutcomeUnknown) as e:
        fn.invoke({"x": 1}, invocation_id="once", retry=kruntimes.Retry())
    assert e.value.invocation_id == "once" and e.value.run == "fn" and not e.value.not_run
    assert len(server.requests) == 1
    req = server.requests[0]
    assert req["path"] == "/apis/kruntimes.io/v1alpha1/namespaces/team/runs/fn/invoke?uid=uid-1"
    assert req["headers"]["authorization"] == "Bearer secret-token"
    assert req["headers"]["content-type"] == "application/json"
    assert req["headers"]["x-kruntime-invocation-id"] == "once"


@pytest.mark.parametrize("code,body,content_type,error", [
    (502, status(502, "InternalError", "runtimed connection broke"), "application/json", kruntimes.OutcomeUnknown),
    (500, status(500, "InternalError", "boom"), "application/json", kruntimes.OutcomeUnknown),
    (503, b"service unavailable\n", "text/plain", kruntimes.OutcomeUnknown),
    (503, status(503, "ServiceUnavailable", "no retryAfterSeconds"), "application/json", kruntimes.OutcomeUnknown),
    (504, status(504, "Timeout", "stopped"), "application/json", kruntimes.InvocationTimeout),
    (409, json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409, "reason": "AlreadyExists",
                      "message": "the outcome of invocation ID \"x\" is no longer known",
                      "details": {"causes": [{"reason": "InvocationOutcomeEvicted", "message": "m"}]}}).encode(),
     "application/json", kruntimes.OutcomeEvicted),
])
def test_an_answer_that_may_come_after_the_handler_ran_is_never_resent(fake, code, body, content_type, error) -> None:
    server, fn = fake(lambda h, n: send(h, code, body, content_type, {"Retry-After": "1"}))
    with pytest.raises(error) as e:
        fn.invoke({}, retry=kruntimes.Retry(deadline=10))
    assert e.value.code == code and not e.value.not_run
    assert len(server.requests) == 1, "sent once, even with retry="


def test_busy_and_unavailable_are_resent_only_with_retry_honouring_retry_after(fake) -> None:
    def reply(h: BaseHTTPRequestHandler, n: int) -> None:
        if n == 1:
            send(h, 429, status(429, "TooManyRequests", "busy", 1), headers={"Retry-After": "1"})
        elif n == 2:
            send(h, 503, status(503, "ServiceUnavailable", "registering", 1), headers={"Retry-After": "1"})
        else:
            ok(h)

    server, fn = fake(reply)
    started = time.monotonic()
    result = fn.invoke({}, invocation_id="same", retry=kruntimes.Retry(deadline=10))
    assert result.output == "done" and result.invocation_id == "same" and result.duration == 0.003
    assert len(server.requests) == 3
    assert time.monotonic() - started >= 2.0, "waited Retry-After (1 s) twice"
    assert {r["headers"]["x-kruntime-invocation-id"] for r in server.requests} == {"same"}


def test_without_retry_busy_and_unavailable_are_raised_after_one_request(fake) -> None:
    server, fn = fake(lambda h, n: send(h, 429, status(429, "TooManyRequests", "busy", 2), headers={"Retry-After": "2"}))
    with pytest.raises(kruntimes.Busy) as e:
        fn.invoke({})
    assert e.value.retry_after == 2 and e.value.not_run
    assert len(server.requests) == 1

    server, fn = fake(lambda h, n: send(h, 503, status(503, "ServiceUnavailable", "not ready", 3)))
    with pytest.raises(kruntimes.Unavailable) as e2:
        fn.invoke({}, retry=kruntimes.Retry(unavailable=False))
    assert e2.value.retry_after == 3 and e2.value.not_run
    assert len(server.requests) == 1


def test_retry_stops_at_its_deadline(fake) -> None:
    server, fn = fake(lambda h, n: send(h, 429, status(429, "TooManyRequests", "busy", 1)))
    started = time.monotonic()
    with pytest.raises(kruntimes.Busy):
        fn.invoke({}, retry=kruntimes.Retry(deadline=2.5))
    assert time.monotonic() - started < 4
    assert 2 <= len(server.requests) <= 3


def test_an_input_over_1_mib_is_refused_before_sending(fake) -> None:
    server, fn = fake(lambda h, n: ok(h))
    with pytest.raises(kruntimes.PayloadTooLarge) as e:
        fn.invoke("x" * (2 << 20))
    assert e.value.not_run and e.value.code == 413
    assert server.requests == []


def test_a_function_error_carries_type_logs_and_invocation_id(fake) -> None:
    def reply(h: BaseHTTPRequestHandler, n: int) -> None:
        send(h, 200, json.dumps({"invocationId": "i-1", "output": None, "durationMillis": 1,
                                 "error": {"type": "ValueError", "message": "no good"},
                                 "logs": {"stdout": "", "stderr": "Traceback"}}).encode(),
             headers={"X-Kruntime-Function-Error": "ValueError", "X-Kruntime-Invocation-ID": "i-1"})

    server, fn = fake(reply)
    with pytest.raises(kruntimes.FunctionError) as e:
        fn.invoke({}, retry=kruntimes.Retry())
    assert (e.value.type, e.value.error_message, e.value.invocation_id) == ("ValueError", "no good", "i-1")
    assert e.value.logs.stderr == "Traceback" and not e.value.not_run
    assert len(server.requests) == 1


def test_nothing_listening_is_connect_failed(tmp_path: pathlib.Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    client = kruntimes.Client(kubeconfig=str(kubeconfig))
    assert client.namespace == "default"
    fn = Function(client, {"metadata": {"name": "fn", "namespace": "default", "uid": "u"}})
    with pytest.raises(kruntimes.ConnectFailed) as e:
        fn.invoke({})
    assert e.value.not_run


def test_retry_unknown_resends_an_unknown_outcome_with_the_same_id(fake) -> None:
    def reply(h: BaseHTTPRequestHandler, n: int) -> None:
        if n == 1:
            drop(h)
        elif n == 2:
            send(h, 503, b"error trying to reach service: http2: ... GOAWAY ...\n", "text/plain")
        elif n == 3:
            send(h, 502, status(502, "InternalError", "runtimed connection broke"))
        else:
            ok(h)

    server, fn = fake(reply)
    result = fn.invoke({}, invocation_id="same", retry=kruntimes.Retry(unknown=True, deadline=10))
    assert result.output == "done"
    assert len(server.requests) == 4
    assert {r["headers"]["x-kruntime-invocation-id"] for r in server.requests} == {"same"}


def test_retry_unknown_stops_at_a_replayed_outcome(fake) -> None:
    server, fn = fake(lambda h, n: send(h, 502, status(502, "InternalError", "runtimed connection broke"),
                                        headers={"X-Kruntime-Deduplicated": "true"} if n > 1 else None))
    with pytest.raises(kruntimes.OutcomeUnknown) as e:
        fn.invoke({}, invocation_id="once", retry=kruntimes.Retry(unknown=True, deadline=10))
    assert e.value.replayed and e.value.code == 502
    assert len(server.requests) == 2, "the repeat's answer is the first attempt's recorded outcome: final"


def test_retry_unknown_gives_up_at_the_deadline_and_never_resends_a_504(fake) -> None:
    server, fn = fake(lambda h, n: drop(h))
    started = time.monotonic()
    with pytest.raises(kruntimes.OutcomeUnknown):
        fn.invoke({}, retry=kruntimes.Retry(unknown=True, deadline=1, max_backoff=0.4))
    assert time.monotonic() - started < 5
    assert 2 <= len(server.requests) <= 6, "waits 0.1 s, then twice as long each time, until the deadline"

    server, fn = fake(lambda h, n: send(h, 504, status(504, "Timeout", "stopped")))
    with pytest.raises(kruntimes.InvocationTimeout):
        fn.invoke({}, retry=kruntimes.Retry(unknown=True, deadline=10))
    assert len(server.requests) == 1
