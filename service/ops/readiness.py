"""Whether the server can take requests: health, ServerReady and ModelReady all read this."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Readiness:
    """Serving state shared by health, ServerReady and ModelReady: loaded + warmed up, not draining."""

    warmed_up: bool = False
    draining: bool = False
    scheduler_healthy: Callable[[], bool] = lambda: True

    @property
    def ready(self) -> bool:
        """True while requests can be served."""
        return self.warmed_up and not self.draining and bool(self.scheduler_healthy())
