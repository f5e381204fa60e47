"""`python -m deploy.image` (`make image-check`): the Debian base (cached), the CPU image built with podman
(layers reused), its size layer by layer, the seconds from `podman run` to SERVING (and from SIGTERM to exit)
over a few starts, then the image tests (pytest, against this image); one JSON line of figures on stdout,
progress on stderr. Exit code 0 when every check passed."""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from deploy.image import base, build, container
from deploy.image.podman import PodmanError, available

ROOT = Path(__file__).resolve().parents[2]
IMAGE_ENV = "TRANSLATOR_TEST_IMAGE"  # the image tests use this image as built instead of building one
SIZE_GOAL_MB, READY_GOAL_S = 600, 10.0
STOP_TIMEOUT_S = 60


def say(text: str) -> None:
    """A progress line on stderr."""
    print(f"image-check: {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loopback_env() -> dict[str, str]:
    """Settings that keep a host-network container on loopback, on free ports."""
    return {"TRANSLATOR_HOST": "127.0.0.1", "TRANSLATOR_METRICS_HOST": "127.0.0.1",
            "TRANSLATOR_PORT": str(free_port()), "TRANSLATOR_HTTP_PORT": str(free_port()),
            "TRANSLATOR_METRICS_PORT": str(free_port())}


def start_and_stop(tag: str) -> tuple[float, float, int]:
    """One start of the image's defaults (read-only root, loopback ports): seconds to SERVING, seconds from
    SIGTERM to exit, and the exit code."""
    env = loopback_env()
    ctr = container.run(tag, env=env)
    try:
        ready = container.until_serving(ctr, int(env["TRANSLATOR_PORT"]))
        stop = time.monotonic()
        ctr.signal("TERM")
        code = ctr.wait(STOP_TIMEOUT_S)
        return ready, time.monotonic() - stop, code
    finally:
        ctr.remove()


def run_tests(tag: str, paths: Sequence[str], report: Path) -> dict[str, int]:
    """The image tests under pytest against `tag` (their output to stderr); counts by outcome."""
    env = os.environ | {IMAGE_ENV: tag}
    argv = [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", f"--junitxml={report}",
            *paths]
    subprocess.run(argv, cwd=ROOT, env=env, stdout=sys.stderr, stderr=sys.stderr, timeout=1800, check=False)
    if not report.is_file():
        return {"passed": 0, "failed": 1, "skipped": 0}
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    return {"passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
            "failed": counts["failures"] + counts["errors"], "skipped": counts["skipped"]}


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=ROOT / "runs" / "image",
                        help="folder of the base's tarball, the build log and the test report")
    parser.add_argument("--mirror", default=base.MIRROR, help="Debian mirror of debootstrap and apt")
    parser.add_argument("--tag", default=build.TAG)
    parser.add_argument("--starts", type=int, default=3, help="starts whose ready time is measured")
    parser.add_argument("tests", nargs="*", help="test files to run against the image (pytest)")
    args = parser.parse_args(argv)
    if args.starts < 1:
        parser.error("--starts must be at least 1")
    if (why := available() or container.cannot_run()) is not None:
        say(why)
        return 1
    try:
        say("base: Debian bookworm minbase (debootstrap, cached)")
        made = base.ensure(args.cache, args.mirror)
        say(f"base {made.tag} from {made.source} in {made.seconds:.1f} s; building {args.tag}")
        built = build.build(ROOT, made.tag, args.cache / "build.log", args.tag)
        say(f"built in {built.seconds:.1f} s ({built.cached} of {built.steps} steps from cache)")
        starts = [start_and_stop(args.tag) for _ in range(args.starts)]
    except (PodmanError, RuntimeError, subprocess.SubprocessError) as exc:
        say(f"failed: {exc}")
        return 1
    say(f"ready after {', '.join(f'{r:.2f}' for r, _, _ in starts)} s")
    checks = run_tests(args.tag, args.tests, args.cache / "tests.xml") if args.tests else {}
    sizes = build.figures(args.tag)
    ready = statistics.median(r for r, _, _ in starts)
    figures = {
        "image": args.tag, "image_id": built.image_id[:12], "base": made.source,
        "base_s": round(made.seconds, 1), "build_s": round(built.seconds, 1),
        "build_steps": built.steps, "build_steps_cached": built.cached, **sizes,
        "ready_s": [round(r, 2) for r, _, _ in starts], "ready_median_s": round(ready, 2),
        "sigterm_to_exit_s": [round(s, 2) for _, s, _ in starts], "exit_codes": [c for _, _, c in starts],
        "checks": checks,
        "goals": {f"image_under_{SIZE_GOAL_MB}_mb": sizes["image_mb"] < SIZE_GOAL_MB,
                  f"ready_under_{READY_GOAL_S:g}_s": ready < READY_GOAL_S},
    }
    print(json.dumps(figures), flush=True)
    ok = all(c == 0 for _, _, c in starts) and not checks.get("failed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
