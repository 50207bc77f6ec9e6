"""The opt-in re-send policy of invocations."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Retry:
    """Which answers an invocation is sent again on.

    By default only the two answers that guarantee the handler did not run
    are retried: ``busy`` (429, another invocation in flight) and
    ``unavailable`` (kruntimes' own 503 with retryAfterSeconds). Each wait
    honours the answer's Retry-After (at most ``max_backoff`` seconds); no
    attempt starts after ``deadline`` seconds from the first.

    ``unknown`` (off by default) also re-sends after
    :class:`~kruntimes.OutcomeUnknown` — a 502, a proxy's plain 503 (e.g.
    kube-apiserver's while a kruntimes-apiserver replica restarts), a broken
    connection, a read timeout — waiting 0.1 s, then twice as long each
    time. That is safe because every invocation carries its ID: the
    runtimed that owns the function answers a repeat with the first
    attempt's recorded outcome, or waits for it, instead of running the
    handler again; an answer marked as such a replay is final. The
    guarantee holds while one owner holds the function and within its
    deduplication window (docs/invoke.md, "Retrying safely"): after the
    function moved to another Pod, or its runtimed restarted, a repeat runs
    again. A 504 is never re-sent.
    """

    busy: bool = True
    unavailable: bool = True
    unknown: bool = False
    deadline: float = 30.0
    max_backoff: float = 5.0
