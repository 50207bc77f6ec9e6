"""Task Runs: run once, wait, cancel, read or follow the log."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generator, Iterator, Mapping, Sequence

import urllib3

from . import errors
from ._transport import API_VERSION, runs_path
from .functions import TERMINAL_PHASES, EnvValue, duration_string, env_list, run_message, watch_run

if TYPE_CHECKING:
    from .client import Client

# How long Task.logs(follow=True) waits before following an attempt again
# that has printed nothing yet, or before looking for the next attempt.
FOLLOW_AGAIN = 0.2


@dataclass(frozen=True)
class TaskResult:
    """How a task Run ended."""

    name: str
    phase: str
    """Succeeded, Failed, Timeout or Cancelled."""
    exit_code: int | None
    outputs: dict[str, str]
    message: str
    attempt: int

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"


class Task:
    """A handle on one task Run (see :meth:`Tasks.run`)."""

    def __init__(self, client: "Client", run: dict[str, Any]) -> None:
        self._client = client
        self.run = run

    @property
    def name(self) -> str:
        return self.run["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.run["metadata"]["namespace"]

    @property
    def phase(self) -> str:
        return (self.run.get("status") or {}).get("phase", "")

    def __repr__(self) -> str:
        return f"Task({self.namespace}/{self.name}, phase={self.phase or 'Pending'})"

    def result(self) -> TaskResult:
        """The result as of the last read (phase may not be terminal yet)."""
        status = self.run.get("status") or {}
        return TaskResult(
            name=self.name,
            phase=status.get("phase", ""),
            exit_code=status.get("exitCode"),
            outputs=dict(status.get("outputs") or {}),
            message=run_message(self.run),
            attempt=int(status.get("attempt") or 0),
        )

    def wait(self, timeout: float | None = None) -> TaskResult:
        """Waits, by watching the Run, until it ends; returns its result.
        Raises :class:`WaitTimeout` after ``timeout`` seconds."""
        for run in watch_run(self._client, self.namespace, self.name, timeout):
            self.run = run
            if self.phase in TERMINAL_PHASES:
                return self.result()
        raise errors.WaitTimeout(f"task Run {self.name} did not end within {timeout:g}s (phase {self.phase})",
                                 run=self.name)

    def cancel(self) -> None:
        """Asks kruntimes to cancel the Run (spec.cancelRequested, as
        ``krt cancel``); :meth:`wait` then returns phase Cancelled (or the
        end it reached first)."""
        self.run = self._client._transport.call(
            "PATCH", runs_path(self.namespace, self.name), run=self.name,
            obj={"spec": {"cancelRequested": True}}, content_type="application/merge-patch+json")

    def logs(self, follow: bool = False, *, stream: str = "All", attempt: int | None = None,
             tail_lines: int | None = None) -> Iterator[str]:
        """Yields the log of an attempt (the latest by default) line by line,
        stdout and stderr interleaved (``stream`` picks one: ``Stdout`` or
        ``Stderr``). Bytes that are not UTF-8 are replaced.

        Without ``follow`` it is the log as of now: the kept log of an
        attempt that ended. With ``follow=True`` lines arrive live as the
        program writes them (``runs/log?follow=true``), each attempt's
        after the one before, until the attempt the Run ended with is
        done; with ``attempt`` given, only that attempt.
        """
        if follow:
            yield from self._follow(stream, attempt, tail_lines)
            return
        query: dict[str, Any] = {"stream": stream, "attempt": attempt, "tailLines": tail_lines}
        resp = self._client._transport.send("GET", runs_path(self.namespace, self.name, "log"), query=query)
        if resp.code != 200:
            raise errors.error_for(resp.code, resp.headers, resp.status(), run=self.name)
        text = resp.body.decode("utf-8", errors="replace")
        yield from text.splitlines(keepends=True)

    def _refresh(self) -> dict[str, Any]:
        self.run = self._client._transport.call("GET", runs_path(self.namespace, self.name), run=self.name)
        return self.run.get("status") or {}

    def _follow(self, stream: str, attempt: int | None, tail_lines: int | None) -> Iterator[str]:
        n = attempt or 1
        while True:
            # Attempt n exists once the Run counts it (the first always does).
            while n > 1 and int(self._refresh().get("attempt") or 0) < n:
                if self.phase in TERMINAL_PHASES:
                    return
                time.sleep(FOLLOW_AGAIN)
            while True:
                got = yield from self._follow_attempt(n, stream, tail_lines)
                status = self._refresh()
                ended = int(status.get("attempt") or 0) > n or self.phase in TERMINAL_PHASES
                # A follow that ended without a byte before the attempt did
                # (the server waits a bounded time for a first byte) is
                # started again; nothing was yielded, so nothing repeats.
                if got or ended:
                    break
                time.sleep(FOLLOW_AGAIN)
            if attempt is not None:
                return
            if self.phase in TERMINAL_PHASES and int((self.run.get("status") or {}).get("attempt") or 0) <= n:
                return
            n += 1

    def _follow_attempt(self, n: int, stream: str, tail_lines: int | None) -> Generator[str, None, int]:
        query: dict[str, Any] = {"follow": "true", "attempt": n, "stream": stream, "tailLines": tail_lines}
        resp = self._client._transport.send("GET", runs_path(self.namespace, self.name, "log"), query=query,
                                            stream=True, timeout=urllib3.Timeout(connect=30, read=None))
        got = 0
        try:
            if resp.code != 200:
                resp.body = resp.raw.read()
                raise errors.error_for(resp.code, resp.headers, resp.status(), run=self.name)
            pending = b""
            for chunk in resp.raw.stream(4096, decode_content=True):
                got += len(chunk)
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", errors="replace") + "\n"
            if pending:
                yield pending.decode("utf-8", errors="replace")
        finally:
            # A follow stopped early has unread data: never reuse its connection.
            resp.raw.close()
            resp.raw.release_conn()
        return got

    def delete(self) -> None:
        """Deletes the Run (a Run already gone is no error)."""
        try:
            self._client._transport.call("DELETE", runs_path(self.namespace, self.name), run=self.name)
        except errors.NotFound:
            pass


class Tasks:
    """``client.tasks``: task Runs of the client's namespace."""

    def __init__(self, client: "Client") -> None:
        self._client = client

    def run(
        self,
        runtime: str,
        *,
        script: str | None = None,
        entrypoint: str | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, EnvValue] | None = None,
        timeout: float | str | None = None,
        wait: bool = True,
        wait_timeout: float | None = None,
        name: str | None = None,
        generate_name: str = "task-",
        labels: Mapping[str, str] | None = None,
        max_attempts: int | None = None,
        namespace: str | None = None,
    ) -> TaskResult | Task:
        """Creates a task Run of ``script`` (inline source, with ``args``) or
        ``entrypoint`` (a command of the Runtime's image, with ``args``).

        With ``wait`` (the default) it waits until the Run ends and returns
        its :class:`TaskResult`; otherwise it returns the :class:`Task`.
        ``timeout`` (seconds or a duration such as ``"10m"``) is the Run's
        own spec.timeout; ``wait_timeout`` bounds only the wait.
        """
        if (script is None) == (entrypoint is None):
            raise ValueError("give exactly one of script= and entrypoint=")
        task_mode: dict[str, Any] = {}
        if entrypoint is not None:
            task_mode["entrypoint"] = entrypoint
        if args:
            task_mode["args"] = [str(a) for a in args]
        spec: dict[str, Any] = {"runtime": runtime, "mode": {"task": task_mode}}
        if script is not None:
            spec["source"] = {"inline": script}
        if env:
            spec["env"] = env_list(env)
        if timeout is not None:
            spec["timeout"] = duration_string(timeout)
        if max_attempts is not None:
            spec["retryPolicy"] = {"maxAttempts": int(max_attempts)}
        metadata: dict[str, Any] = {"labels": dict(labels or {})}
        if name:
            metadata["name"] = name
        else:
            metadata["generateName"] = generate_name
        ns = namespace or self._client.namespace
        run = self._client._transport.call(
            "POST", runs_path(ns), run=name,
            obj={"apiVersion": API_VERSION, "kind": "Run", "metadata": metadata, "spec": spec})
        task = Task(self._client, run)
        if not wait:
            return task
        return task.wait(wait_timeout)

    def get(self, name: str, *, namespace: str | None = None) -> Task:
        """The task Run ``name``."""
        ns = namespace or self._client.namespace
        return Task(self._client, self._client._transport.call("GET", runs_path(ns, name), run=name))


__all__ = ["Task", "TaskResult", "Tasks"]
