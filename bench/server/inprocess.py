"""In-process decoding in a child process, timed there: the reference a server is compared with.

    with InProcessDecoder(bundle, intra_op_threads=0) as decoder:
        seconds = decoder.seconds("Send 4,217 apples.")  # Runner.translate([text]) in the child

The child (`python -m bench.server.inprocess BUNDLE THREADS`) loads one `Runner` and answers one JSON
line per text on stdin with the seconds `Runner.translate([text])` took, so the parent's own work
(a load generator, an event loop) is never timed and never competes with the decoding.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


class InProcessDecoder:
    """A child process holding a Runner (context manager)."""

    def __init__(self, bundle: Path, intra_op_threads: int = 0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.server.inprocess", str(bundle), str(intra_op_threads)],
            cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8",
        )

    def seconds(self, text: str) -> float:
        """Seconds of Runner.translate([text]) in the child."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"text": text}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the in-process decoder exited with code {self.proc.wait()}")
        return float(json.loads(line)["seconds"])

    def close(self) -> None:
        """End the child (closing its stdin ends its loop)."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> InProcessDecoder:
        """The decoder itself."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Close on leaving a with-block."""
        self.close()


def main(argv: list[str]) -> int:
    """Child: load the runner, then time one translation per input line until stdin closes."""
    from service.runtime.runner import Runner

    bundle, threads = argv
    runner = Runner(bundle, intra_op_threads=int(threads))
    for line in sys.stdin:
        text = json.loads(line)["text"]
        t0 = time.perf_counter()
        runner.translate([text])
        sys.stdout.write(json.dumps({"seconds": time.perf_counter() - t0}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
