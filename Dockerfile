# Serving image: torch-free, ONNX Runtime on CUDA (or CPU only), the default model bundle inside.
#   docker build -t translator .                                # CUDA 13 + cuDNN 9, onnxruntime-gpu
#   docker build -t translator:cpu --build-arg RUNTIME=cpu .    # Ubuntu only, onnxruntime
#   docker run --gpus all -p 8001:8001 -p 8002:8002 translator
# Settings are the TRANSLATOR_* environment variables below (`docker run -e TRANSLATOR_BATCHING=dynamic`,
# every flag of `python -m service.server --help` has one); arguments after the image name are flags.
# Another bundle: `-v /path/to/bundle:/models/bundle:ro -e TRANSLATOR_BUNDLE=/models/bundle`.
# podman builds it too (`podman build --format docker ...`, the format that keeps HEALTHCHECK): `make
# image-check` builds the CPU image on a Debian base and checks it. See docs/deployment.md.

ARG RUNTIME=cuda
# onnxruntime-gpu 1.31 is built for CUDA 13 and cuDNN 9.
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04
# The same Ubuntu release as the CUDA image: builder and runtime share one Python (3.12).
ARG CPU_IMAGE=ubuntu:24.04

# One base per runtime; BuildKit builds only the one that RUNTIME selects (base-${RUNTIME} names a stage
# of this file, not an image, hence the DL3006 exception below).
FROM ${CUDA_IMAGE} AS base-cuda
ENV TRANSLATOR_PROVIDERS=CUDAExecutionProvider,CPUExecutionProvider

FROM ${CPU_IMAGE} AS base-cpu
ENV TRANSLATOR_PROVIDERS=CPUExecutionProvider

# hadolint ignore=DL3006
FROM base-${RUNTIME} AS base
# Distribution packages follow the base image's release: pinning them would break with every update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*

# Builder: the serving dependencies (pinned in pyproject.toml, no torch) in /opt/venv, the gRPC modules
# generated from protos/ by a throwaway tools environment, and /app assembled read-only.
FROM base AS builder
ARG RUNTIME
# The building machine's pip settings (indexes, trusted hosts, timeout, retries), passed as build
# arguments (`make image-check` passes its own): unset unless given, and not part of the runtime image.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
ARG PIP_DEFAULT_TIMEOUT
ARG PIP_RETRIES
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml ./
COPY deploy/docker/requirements.py deploy/docker/
# pip verifies TLS with the CA bundle of the build secret pip-cert when one is passed (read from a mount,
# kept out of every layer), else with its own. Then what serving never runs leaves the venv: the
# distributions the requirements do not need (pip, setuptools, tokenizers' Hugging Face Hub client and what
# only it pulls in: requirements.py --unused) and the packages' own test suites.
RUN --mount=type=secret,id=pip-cert \
    if [ -s /run/secrets/pip-cert ]; then export PIP_CERT=/run/secrets/pip-cert; fi \
    && python3 deploy/docker/requirements.py --runtime "${RUNTIME}" > requirements.txt \
    && python3 deploy/docker/requirements.py --tools > tools.txt \
    && python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check -r requirements.txt \
    && /opt/venv/bin/python deploy/docker/requirements.py --runtime "${RUNTIME}" --unused > unused.txt \
    && /opt/venv/bin/python -m pip uninstall -y -q --disable-pip-version-check -r unused.txt \
    && find /opt/venv -depth -type d -name tests -exec rm -rf {} +
COPY protos/ protos/
RUN --mount=type=secret,id=pip-cert \
    if [ -s /run/secrets/pip-cert ]; then export PIP_CERT=/run/secrets/pip-cert; fi \
    && python3 -m venv /opt/tools \
    && /opt/tools/bin/pip install --no-cache-dir --disable-pip-version-check -r tools.txt -c requirements.txt \
    && /opt/tools/bin/python -m protos.generate
WORKDIR /app
COPY interface/ interface/
COPY service/ service/
COPY artifacts/default/bundle/ artifacts/default/bundle/
# Byte-compiled here (the container may run with a read-only root filesystem), then made read-only:
# the runtime copies /app as it is, owned by root, so the service user can read but not change it.
RUN cp -a /src/protos protos \
    && /opt/venv/bin/python -m compileall -q protos interface service \
    && chmod -R a=rX /app

# Runtime: the virtual environment and /app, run by an unprivileged user.
FROM base AS runtime
RUN groupadd --system --gid 10001 translator \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin translator
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /app /app
WORKDIR /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TRANSLATOR_BUNDLE=/app/artifacts/default/bundle \
    TRANSLATOR_HOST=0.0.0.0 \
    TRANSLATOR_METRICS_HOST=0.0.0.0 \
    TRANSLATOR_HTTP_PORT=8000 \
    TRANSLATOR_PORT=8001 \
    TRANSLATOR_METRICS_PORT=8002 \
    TRANSLATOR_BATCHING=continuous \
    TRANSLATOR_MAX_BATCH_SIZE=32 \
    TRANSLATOR_MAX_QUEUE_DELAY_MS=5 \
    TRANSLATOR_QUEUE_SIZE=256 \
    TRANSLATOR_DRAIN_GRACE_S=20 \
    TRANSLATOR_LOG_LEVEL=INFO
USER 10001:10001
# HTTP/REST (KServe v2 REST, generate), gRPC, Prometheus metrics: Triton's ports
EXPOSE 8000 8001 8002
# The gRPC health protocol on TRANSLATOR_PORT: SERVING once the model is loaded and warmed up.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-m", "service.healthcheck", "--timeout", "3"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["python", "-m", "service.server"]
