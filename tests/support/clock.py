"""Time for chain tests: one fixture, both validators.

A test that needs time to pass says so in "days" and moves the clock through `Clock`:

- on the drop-in validator a day is a day (86,400 s) and `advance_to` travels in time at once;
- on solana-test-validator a day is one second and `advance_to` waits for the cluster's clock
  (the Clock sysvar at `confirmed`), so a month of renewals is half a minute of wall time.

Plans under test take their period and grace from `days(...)`, so the same test runs
unchanged on both. Keep the number of days a test waits through small: it is wall time on
the real validator.
"""

from __future__ import annotations

from tests.support.billing import DAY
from tests.support.chain import Chain


class Clock:
    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self.day = DAY if chain.can_time_travel else 1

    def days(self, n: int) -> int:
        """A duration of `n` days, in seconds of this validator's test time."""
        return n * self.day

    def now(self) -> int:
        """The cluster clock (the Clock sysvar), unix seconds."""
        return self.chain.unix_timestamp()

    def advance_to(self, unix_timestamp: int) -> None:
        """Returns once the cluster clock reads at least `unix_timestamp`."""
        self.chain.advance_to(unix_timestamp)

    def advance(self, seconds: int) -> int:
        """Moves the clock `seconds` past now; returns the new time (at least that)."""
        target = self.now() + seconds
        self.advance_to(target)
        return target
