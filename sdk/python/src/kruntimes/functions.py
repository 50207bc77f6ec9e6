"""Function Runs: create, wait until Ready, invoke, delete."""

from __future__ import annotations

import json
import pathlib
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import urllib3

from . import errors
from ._transport import API_VERSION, runs_path
from .retry import Retry

if TYPE_CHECKING:
    from .client import Client

#: The largest invoke body kruntimes accepts (apis/invocation.MaxInputBytes).
MAX_INPUT_BYTES = 1 << 20
#: The longest invocation ID kruntimes accepts.
MAX_INVOCATION_ID_BYTES = 128
#: The server's default request timeout when none is asked for.
_SERVER_DEFAULT_TIMEOUT = 60.0

HEADER_INVOCATION_ID = "X-Kruntime-Invocation-ID"
HEADER_FUNCTION_ERROR = "X-Kruntime-Function-Error"
HEADER_DEDUPLICATED = "X-Kruntime-Deduplicated"

# The first wait before an unknown outcome is sent again; it doubles up to
# Retry.max_backoff (no answer said how long to wait).
_FIRST_UNKNOWN_WAIT = 0.1

TERMINAL_PHASES = ("Succeeded", "Failed", "Timeout", "Cancelled")


@dataclass(frozen=True)
class Logs:
    """What a handler wrote during one invocation (at most 64 KiB each)."""

    stdout: str = ""
    stderr: str = ""


@dataclass(frozen=True)
class InvokeResult:
    """A completed invocation."""

    output: Any
    outputs: dict[str, str]
    logs: Logs
    invocation_id: str
    duration: float
    """How long the handler ran, in seconds."""


def duration_string(seconds: float | str | None) -> str | None:
    """A Go duration for spec.timeout: ``90`` → ``"90s"``; strings pass."""
    if seconds is None or isinstance(seconds, str):
        return seconds
    return f"{float(seconds):g}s"


@dataclass(frozen=True)
class SecretKeyRef:
    """An environment variable read from ``key`` of the Secret ``name`` in
    the Run's namespace, e.g. ``env={"TOKEN": SecretKeyRef("db", "password")}``.

    runtimed reads it when each attempt starts, as the Runtime's
    ServiceAccount (``runtime-<runtime>``), which a namespace admin must have
    granted ``get`` on that Secret; otherwise the Run fails with the kubectl
    commands that grant it. The value is never in the Run. ``optional``
    leaves the variable unset when the Secret or key does not exist.
    """

    name: str
    key: str
    optional: bool = False


#: A value of ``env=``: the value itself, or where runtimed reads it.
EnvValue = str | SecretKeyRef


def env_list(env: Mapping[str, EnvValue] | None) -> list[dict[str, Any]]:
    """spec.env from a mapping: a plain value as ``value``, a
    :class:`SecretKeyRef` as ``valueFrom.secretKeyRef``."""
    out: list[dict[str, Any]] = []
    for name, value in (env or {}).items():
        if isinstance(value, SecretKeyRef):
            ref: dict[str, Any] = {"name": value.name, "key": value.key}
            if value.optional:
                ref["optional"] = True
            out.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
        else:
            out.append({"name": name, "value": str(value)})
    return out


def run_message(run: dict[str, Any]) -> str:
    status = run.get("status") or {}
    return status.get("message") or ""


class Function:
    """A handle on one function Run (see :meth:`Functions.create`)."""

    def __init__(self, client: "Client", run: dict[str, Any], *, owned: bool = False) -> None:
        self._client = client
        self.run = run
        self._owned = owned

    @property
    def name(self) -> str:
        return self.run["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.run["metadata"]["namespace"]

    @property
    def uid(self) -> str:
        return self.run["metadata"]["uid"]

    @property
    def phase(self) -> str:
        return (self.run.get("status") or {}).get("phase", "")

    def __repr__(self) -> str:
        return f"Function({self.namespace}/{self.name}, phase={self.phase or 'Pending'})"

    def __enter__(self) -> "Function":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._owned:
            self.delete()

    def refresh(self) -> "Function":
        """Reads the Run again."""
        self.run = self._client._transport.call("GET", runs_path(self.namespace, self.name), run=self.name)
        return self

    def wait_ready(self, timeout: float = 120.0) -> "Function":
        """Waits, by watching the Run, until it is Ready and can be invoked.

        Raises :class:`RunEnded` with the Run's message as soon as it ends
        (e.g. Failed: its source did not import), :class:`NotFound` when it
        is deleted, :class:`WaitTimeout` after ``timeout`` seconds.
        """
        for run in self._client._watch_run(self.namespace, self.name, timeout):
            self.run = run
            if _is_ready(run):
                return self
            phase = self.phase
            if phase in TERMINAL_PHASES:
                raise errors.RunEnded(
                    f"function Run {self.name} ended {phase} before it was Ready: {run_message(run)}",
                    phase=phase, run=self.name)
        raise errors.WaitTimeout(
            f"function Run {self.name} was not Ready within {timeout:g}s (phase {self.phase or 'Pending'}: {run_message(self.run)})",
            run=self.name)

    def invoke(
        self,
        input: Any = None,
        *,
        invocation_id: str | None = None,
        timeout: float | None = None,
        retry: Retry | None = None,
    ) -> InvokeResult:
        """Invokes the function once with ``input`` (anything JSON-able) and
        returns its result.

        The request is sent once: no HTTP-level retry, ever. With ``retry``,
        it is sent again (same invocation ID) after a 429 or kruntimes' own
        503, the answers that guarantee the handler did not run, and — with
        ``Retry(unknown=True)`` — after an unknown outcome, which the owning
        runtimed answers from its record of the first. A handler that raised
        is :class:`FunctionError`; see :mod:`kruntimes.errors` for the
        others.
        """
        body = json.dumps(input).encode()
        invocation_id = invocation_id or uuid.uuid4().hex
        if len(body) > MAX_INPUT_BYTES:
            raise errors.PayloadTooLarge(
                f"the input is {len(body)} bytes of JSON, over the {MAX_INPUT_BYTES}-byte limit of an invocation; it was not sent",
                code=413, run=self.name, invocation_id=invocation_id)
        if len(invocation_id.encode()) > MAX_INVOCATION_ID_BYTES:
            raise errors.Invalid(f"the invocation ID has over {MAX_INVOCATION_ID_BYTES} bytes", run=self.name,
                                 invocation_id=invocation_id)
        started = time.monotonic()
        unknown_wait = _FIRST_UNKNOWN_WAIT
        while True:
            try:
                return self._invoke_once(body, invocation_id, timeout)
            except (errors.Busy, errors.Unavailable) as e:
                if retry is None or (isinstance(e, errors.Busy) and not retry.busy) \
                        or (isinstance(e, errors.Unavailable) and not retry.unavailable):
                    raise
                failed, wait = e, min(max(e.retry_after, 0.05), retry.max_backoff)
            except errors.OutcomeUnknown as e:
                # A replay is the first attempt's recorded outcome: final.
                if retry is None or not retry.unknown or e.replayed:
                    raise
                failed, wait = e, unknown_wait
                unknown_wait = min(unknown_wait * 2, retry.max_backoff)
            if time.monotonic() - started + wait > retry.deadline:
                raise failed
            time.sleep(wait)

    def _invoke_once(self, body: bytes, invocation_id: str, timeout: float | None) -> InvokeResult:
        query: dict[str, Any] = {"uid": self.run["metadata"].get("uid")}
        if timeout is not None:
            query["timeout"] = f"{int(timeout * 1000)}ms"
        # The server answers (504) before its deadline; wait a little longer
        # for that answer than the invocation may take.
        read = (timeout if timeout is not None else _SERVER_DEFAULT_TIMEOUT) + 5.0
        transport = self._client._transport
        try:
            resp = transport.send(
                "POST", runs_path(self.namespace, self.name, "invoke"), query=query, body=body,
                headers={"Content-Type": "application/json", HEADER_INVOCATION_ID: invocation_id},
                timeout=urllib3.Timeout(connect=30, read=read))
        except Exception as e:  # noqa: BLE001 - every transport failure is classified
            from ._transport import not_sent
            if not_sent(e):
                raise errors.ConnectFailed(f"cannot connect to {transport.host}: {e}", run=self.name,
                                           invocation_id=invocation_id) from e
            raise errors.OutcomeUnknown(
                f"the invocation was sent and no answer came back ({type(e).__name__}: {e}); the handler may have run",
                run=self.name, invocation_id=invocation_id) from e
        invocation_id = resp.headers.get(HEADER_INVOCATION_ID) or invocation_id
        if resp.code != 200:
            err = errors.error_for(resp.code, resp.headers, resp.status(), run=self.name,
                                   invocation_id=invocation_id, invoke=True)
            err.replayed = resp.headers.get(HEADER_DEDUPLICATED, "").lower() == "true"
            raise err
        try:
            doc = resp.json()
        except ValueError as e:
            raise errors.OutcomeUnknown(f"the answer is not an InvokeResult: {resp.body[:200]!r}", code=200,
                                        run=self.name, invocation_id=invocation_id) from e
        logs = doc.get("logs") or {}
        result = InvokeResult(
            output=doc.get("output"),
            outputs=dict(doc.get("outputs") or {}),
            logs=Logs(stdout=logs.get("stdout", ""), stderr=logs.get("stderr", "")),
            invocation_id=doc.get("invocationId") or invocation_id,
            duration=(doc.get("durationMillis") or 0) / 1000.0,
        )
        failure = doc.get("error")
        if failure:
            raise errors.FunctionError(failure.get("type", "") or resp.headers.get(HEADER_FUNCTION_ERROR, ""),
                                       failure.get("message", ""), result=result, code=200, run=self.name,
                                       invocation_id=result.invocation_id)
        return result

    def delete(self) -> None:
        """Deletes the Run (a Run already gone is no error)."""
        try:
            self._client._transport.call("DELETE", runs_path(self.namespace, self.name), run=self.name)
        except errors.NotFound:
            pass


def _is_ready(run: dict[str, Any]) -> bool:
    status = run.get("status") or {}
    if status.get("phase") != "Ready":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


class Functions:
    """``client.functions``: function Runs of the client's namespace."""

    def __init__(self, client: "Client") -> None:
        self._client = client

    def create(
        self,
        name: str | None = None,
        *,
        runtime: str,
        source: str | pathlib.Path,
        handler: str,
        generate_name: str | None = None,
        path: str | None = None,
        env: Mapping[str, EnvValue] | None = None,
        idle_timeout: int | None = None,
        timeout: float | str | None = None,
        labels: Mapping[str, str] | None = None,
        max_attempts: int | None = None,
        namespace: str | None = None,
    ) -> Function:
        """Creates a function Run and returns its handle (not yet Ready: call
        :meth:`Function.wait_ready`).

        A ``str`` source is written as ``main.py`` (so ``handler="main.handle"``);
        a ``pathlib.Path`` is read and written under its own file name;
        ``path`` overrides either. ``timeout`` (seconds, or a duration such as
        ``"5m"``) bounds the Run's life, ``idle_timeout`` (seconds) ends it
        after that long without an invocation. Without a name, one is
        generated from ``generate_name`` (default ``"fn-"``). Used as a
        context manager, the Function is deleted at the end of the block.
        """
        if isinstance(source, pathlib.Path):
            inline = source.read_text()
            inline_path = path or source.name
        else:
            inline = source
            inline_path = path or "main.py"
        metadata: dict[str, Any] = {"labels": dict(labels or {})}
        if name:
            metadata["name"] = name
        else:
            metadata["generateName"] = generate_name or "fn-"
        function: dict[str, Any] = {"handler": handler}
        if idle_timeout is not None:
            function["idleTimeoutSeconds"] = int(idle_timeout)
        spec: dict[str, Any] = {
            "runtime": runtime,
            "source": {"inline": inline, "inlinePath": inline_path},
            "mode": {"function": function},
        }
        if env:
            spec["env"] = env_list(env)
        if timeout is not None:
            spec["timeout"] = duration_string(timeout)
        if max_attempts is not None:
            spec["retryPolicy"] = {"maxAttempts": int(max_attempts)}
        ns = namespace or self._client.namespace
        run = self._client._transport.call(
            "POST", runs_path(ns), run=name,
            obj={"apiVersion": API_VERSION, "kind": "Run", "metadata": metadata, "spec": spec})
        return Function(self._client, run, owned=True)

    def get(self, name: str, *, namespace: str | None = None) -> Function:
        """The function Run ``name``."""
        ns = namespace or self._client.namespace
        return Function(self._client, self._client._transport.call("GET", runs_path(ns, name), run=name))

    def list(self, labels: Mapping[str, str] | str | None = None, *, namespace: str | None = None) -> list[Function]:
        """The function Runs of the namespace, with these labels if given (a
        mapping, or a label selector string)."""
        ns = namespace or self._client.namespace
        query = {}
        if labels:
            query["labelSelector"] = labels if isinstance(labels, str) else ",".join(f"{k}={v}" for k, v in labels.items())
        items = self._client._transport.call("GET", runs_path(ns), query=query)["items"]
        return [Function(self._client, r) for r in items if ((r.get("spec") or {}).get("mode") or {}).get("function") is not None]


def watch_run(client: "Client", namespace: str, name: str, timeout: float | None) -> Iterator[dict[str, Any]]:
    """Yields the Run's current state, then each change, until ``timeout``
    seconds passed (a list and watch on metadata.name, as kubectl wait does).
    Raises NotFound when the Run is deleted."""
    transport = client._transport
    deadline = None if timeout is None else time.monotonic() + timeout
    selector = {"fieldSelector": f"metadata.name={name}"}
    while True:
        listed = transport.call("GET", runs_path(namespace), query=selector, run=name)
        items = listed.get("items") or []
        if not items:
            raise errors.NotFound(f"run {name} not found", code=404, run=name)
        yield items[0]
        rv = listed["metadata"]["resourceVersion"]
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            expired = False
            for event in transport.watch(runs_path(namespace), dict(selector, resourceVersion=rv,
                                                                   allowWatchBookmarks="true"),
                                         min(left, 300) if left is not None else 300):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    expired = True  # e.g. 410 Gone: list again
                    break
                rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    raise errors.NotFound(f"run {name} was deleted", code=404, run=name)
                yield obj
            if expired:
                break
