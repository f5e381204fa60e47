"""Progress of a long command: a tqdm bar on a terminal, a few plain lines where the output is no terminal
(CI logs, files)."""

from __future__ import annotations

import math
import sys
from typing import TextIO

from tqdm import tqdm


class Progress:
    """`done` out of `total`: a tqdm bar on a TTY, else a line at each 1/`lines` of the total."""

    def __init__(self, total: int, desc: str, stream: TextIO | None = None, lines: int = 10) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.desc = max(1, total), desc
        self.every = max(1, math.ceil(self.total / max(1, lines)))
        self.done = 0
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = tqdm(total=self.total, desc=desc, file=self.stream, dynamic_ncols=True) if tty else None

    def update(self, n: int = 1, status: str = "") -> None:
        """Count n more done; `status` is shown beside the count."""
        before, self.done = self.done, self.done + n
        if self.bar is not None:
            self.bar.update(n)
            if status:
                self.bar.set_postfix_str(status, refresh=False)
        elif self.done // self.every > before // self.every or (self.done >= self.total > before):
            tail = f" {status}" if status else ""
            print(f"{self.desc}: {self.done}/{self.total} ({100 * self.done / self.total:.0f}%){tail}",
                  file=self.stream, flush=True)

    def close(self) -> None:
        """End the bar (plain lines need no ending)."""
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
