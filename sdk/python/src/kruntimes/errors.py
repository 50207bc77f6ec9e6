"""Errors of the kruntimes SDK.

Every error says whether the handler may have run: ``not_run`` is True only
when kruntimes guarantees it did not (the request was refused before the
handler started, or never left this process). Only :class:`Busy` and
:class:`Unavailable` are worth sending again unchanged, and only they are
re-sent by an opt-in :class:`kruntimes.Retry`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One field error of a 422 Invalid answer."""

    field: str
    reason: str
    message: str


class KruntimesError(Exception):
    """Base of every error the SDK raises.

    ``code`` is the HTTP status (0 when there was no answer), ``reason`` the
    Kubernetes Status reason, ``run`` the Run's name and ``invocation_id``
    the invocation's ID when the error is an invocation's.
    """

    #: True when kruntimes guarantees that the handler did not run.
    not_run: bool = True
    #: True when the answer repeats the recorded outcome of an earlier
    #: attempt with the same invocation ID (X-Kruntime-Deduplicated).
    replayed: bool = False

    def __init__(
        self,
        message: str,
        *,
        code: int = 0,
        reason: str = "",
        run: str | None = None,
        invocation_id: str | None = None,
        status: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.run = run
        self.invocation_id = invocation_id
        self.status = status or {}

    def __str__(self) -> str:
        parts = [self.message]
        if self.run:
            parts.append(f"run={self.run}")
        if self.invocation_id:
            parts.append(f"invocation={self.invocation_id}")
        if self.code:
            parts.append(f"code={self.code}")
        return " ".join(parts) if len(parts) == 1 else f"{parts[0]} ({', '.join(parts[1:])})"


class FunctionError(KruntimesError):
    """The handler ran and failed (a 200 carrying ``error``).

    ``type`` is the error's type (the exception class, or e.g. NonZeroExit,
    WorkerExited), ``logs`` what the handler wrote, ``result`` the whole
    :class:`kruntimes.InvokeResult`.
    """

    not_run = False

    def __init__(self, type: str, message: str, *, result: Any = None, **kw: Any) -> None:
        super().__init__(f"{type}: {message}", **kw)
        self.type = type
        self.error_message = message
        self.result = result
        self.logs = getattr(result, "logs", None)


class Busy(KruntimesError):
    """429: the function already has an invocation in flight. It did not run;
    send it again after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: float = 1.0, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class Unavailable(KruntimesError):
    """kruntimes' own 503 with retryAfterSeconds: the function is not Ready
    (registering, recovering) or its Pod refused the call before the handler
    started. It did not run; send it again after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: float = 1.0, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class InvocationTimeout(KruntimesError):
    """504: the invocation did not complete in time and was stopped. The
    handler ran, possibly partly."""

    not_run = False


class OutcomeUnknown(KruntimesError):
    """The request was sent and no answer says what happened: a 502, any other
    5xx (a plain 503 from kube-apiserver's proxy included), a broken
    connection or a read timeout. The handler may have run."""

    not_run = False


class NotFound(KruntimesError):
    """404: no such Run (or not the UID asked for)."""


class Forbidden(KruntimesError):
    """403: the caller may not do this (e.g. ``create runs/invoke``)."""


class Invalid(KruntimesError):
    """422: the object or request is invalid; ``causes`` name each field."""

    def __init__(self, message: str, *, causes: list[Cause] | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.causes: list[Cause] = causes or []


class PayloadTooLarge(KruntimesError):
    """413, or refused before sending: the invoke body is over 1 MiB."""


class Conflict(KruntimesError):
    """409: e.g. the Run ended or is being deleted, or already exists."""


#: The cause type of the 409 that answers a repeat of an invocation ID
#: whose recorded outcome was evicted.
CAUSE_OUTCOME_EVICTED = "InvocationOutcomeEvicted"


class OutcomeEvicted(Conflict):
    """409 InvocationOutcomeEvicted: a repeat of an invocation ID whose
    recorded outcome runtimed evicted before its window ended. The first
    attempt ran, or may have; this repeat did not run, and every repeat of
    the ID is refused the same way: send a new invocation ID to run it
    again."""

    not_run = False


class ConnectFailed(KruntimesError):
    """No connection to the API server could be made: nothing was sent."""


class RunEnded(KruntimesError):
    """A Run waited on ended (Failed, Timeout, Cancelled) instead of becoming
    Ready; ``phase`` is its phase and the message the Run's."""

    def __init__(self, message: str, *, phase: str = "", **kw: Any) -> None:
        super().__init__(message, **kw)
        self.phase = phase


class WaitTimeout(KruntimesError):
    """A wait did not see what it waited for within its timeout."""


def _retry_after(headers: Any, status: dict[str, Any]) -> float:
    details = status.get("details") or {}
    seconds = details.get("retryAfterSeconds")
    if not seconds:
        try:
            seconds = int(headers.get("Retry-After", ""))
        except (TypeError, ValueError):
            seconds = 1
    return float(max(seconds, 0))


def error_for(
    code: int,
    headers: Any,
    status: dict[str, Any] | None,
    *,
    run: str | None = None,
    invocation_id: str | None = None,
    invoke: bool = False,
) -> KruntimesError:
    """Maps an HTTP error answer to its error. ``status`` is the decoded
    metav1.Status, or None when the body was none (a proxy's plain text)."""
    st = status or {}
    message = st.get("message") or f"HTTP {code}"
    kw: dict[str, Any] = dict(code=code, reason=st.get("reason", ""), run=run, invocation_id=invocation_id, status=st)
    if code == 429:
        return Busy(message, retry_after=_retry_after(headers, st), **kw)
    if code == 503 and status is not None and (st.get("details") or {}).get("retryAfterSeconds"):
        return Unavailable(message, retry_after=_retry_after(headers, st), **kw)
    if code == 504:
        return InvocationTimeout(message, **kw) if invoke else KruntimesError(message, **kw)
    if code >= 500 and code != 501:
        if invoke:
            return OutcomeUnknown(message, **kw)
        err = KruntimesError(message, **kw)
        err.not_run = False
        return err
    if code == 404:
        return NotFound(message, **kw)
    if code == 403 or code == 401:
        return Forbidden(message, **kw)
    if code == 422:
        causes = [
            Cause(field=c.get("field", ""), reason=c.get("reason", ""), message=c.get("message", ""))
            for c in (st.get("details") or {}).get("causes") or []
        ]
        return Invalid(message, causes=causes, **kw)
    if code == 413:
        return PayloadTooLarge(message, **kw)
    if code == 409:
        if any(c.get("reason") == CAUSE_OUTCOME_EVICTED for c in (st.get("details") or {}).get("causes") or []):
            return OutcomeEvicted(message, **kw)
        return Conflict(message, **kw)
    return KruntimesError(message, **kw)
