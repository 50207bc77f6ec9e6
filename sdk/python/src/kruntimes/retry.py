"""The opt-in re-send policy of invocations."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Retry:
    """Which answers an invocation is sent again on.

    Only the two answers that guarantee the handler did not run can be
    retried: ``busy`` (429, another invocation in flight) and ``unavailable``
    (kruntimes' own 503 with retryAfterSeconds). Each wait honours the
    answer's Retry-After (at most ``max_backoff`` seconds); no attempt starts
    after ``deadline`` seconds from the first. Nothing else is ever re-sent:
    a 502, a 504, a proxy's plain 503 or a broken connection may come after
    the handler ran.
    """

    busy: bool = True
    unavailable: bool = True
    deadline: float = 30.0
    max_backoff: float = 5.0
