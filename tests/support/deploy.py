"""Helpers of the deployment tests: free ports, server processes, metric names, Kubernetes files."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import promql_parser
import yaml

from tests.support import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",), "info": ("_info",), "summary": ("", "_sum", "_count", "_created")}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def metric_sample_names() -> set[str]:
    """Every sample name the service exports (translator_*), derived from service/ops/metrics.py."""
    from prometheus_client import REGISTRY

    from service.ops import metrics  # noqa: F401 - registers the translator_* collectors

    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("translator_"):
            names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def promql_selectors(expr: str) -> set[str]:
    """Metric names selected by a PromQL expression (raises ValueError when it does not parse)."""
    names: set[str] = set()

    def visit(node: object) -> None:
        """Collect the name of every vector selector."""
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


@dataclass
class ServerProcess:
    """A running `python -m service.server` (or any command) with its log files."""

    proc: subprocess.Popen
    stdout: Path
    stderr: Path

    def logs(self) -> str:
        """Both log files, for assertion messages."""
        return f"stdout:\n{self.stdout.read_text()}\nstderr:\n{self.stderr.read_text()}"

    def alive(self) -> bool:
        """Still running."""
        return self.proc.poll() is None


@contextmanager
def running(argv: Sequence[str], env: Mapping[str, str], cwd: Path, log_dir: Path) -> Iterator[ServerProcess]:
    """Start `argv` (output to log_dir); on exit SIGTERM it, wait (bounded), kill it if still there."""
    log_dir.mkdir(parents=True, exist_ok=True)
    out, err = log_dir / "stdout.log", log_dir / "stderr.log"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdout=stdout, stderr=stderr,
                                stdin=subprocess.DEVNULL)
    server = ServerProcess(proc, out, err)
    try:
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def base_env() -> dict[str, str]:
    """This process's environment without any TRANSLATOR_* setting (each test sets its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TRANSLATOR_")}


def load(name: str) -> list[dict[str, Any]]:
    """The YAML documents of one file of deploy/kubernetes."""
    return [doc for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]


def adapter_rules() -> list[dict[str, Any]]:
    """The custom rules of prometheus-adapter-values.yaml."""
    values = load("prometheus-adapter-values.yaml")[0]
    assert values["rules"]["default"] is False
    return values["rules"]["custom"]


def render_adapter_query(rule: dict[str, Any], matchers: str, group_by: str) -> str:
    """The adapter's metricsQuery with its template fields filled in, as the adapter does."""
    series = next(iter(promql_selectors(rule["seriesQuery"])))
    return (rule["metricsQuery"].replace("<<.Series>>", series).replace("<<.LabelMatchers>>", matchers)
            .replace("<<.GroupBy>>", group_by))
