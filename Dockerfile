# Serving image: torch-free, ONNX Runtime on CUDA (falls back to CPU when no GPU is visible).
#   docker build -t translator .                       # CUDA image (onnxruntime-gpu)
#   docker build -t translator:cpu --build-arg RUNTIME=cpu .   # CPU-only image (onnxruntime)
#   docker run --gpus all -p 8001:8001 -p 8002:8002 translator
# Settings are TRANSLATOR_* environment variables (see `python -m service.server --help`);
# mount another bundle and set TRANSLATOR_BUNDLE to serve it.
ARG RUNTIME=cuda
# onnxruntime-gpu 1.31 needs CUDA 13 and cuDNN 9.
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04

FROM ${CUDA_IMAGE} AS base
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*

FROM base AS builder
ARG RUNTIME
WORKDIR /src
COPY pyproject.toml ./
COPY protos/ protos/
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir --upgrade pip
# Serving dependencies only (no torch); the CPU image swaps onnxruntime-gpu for onnxruntime.
RUN /opt/venv/bin/pip install --no-cache-dir ".[serve]" grpcio-tools==1.81.1 \
    && if [ "$RUNTIME" = "cpu" ]; then \
         ORT=$(/opt/venv/bin/pip show onnxruntime-gpu | sed -n 's/^Version: //p') \
         && /opt/venv/bin/pip uninstall -y onnxruntime-gpu \
         && /opt/venv/bin/pip install --no-cache-dir "onnxruntime==$ORT"; \
       fi
RUN /opt/venv/bin/python -m protos.generate && /opt/venv/bin/pip uninstall -y grpcio-tools

FROM base AS runtime
RUN useradd --create-home --uid 10001 translator
WORKDIR /app
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /src/protos/ protos/
COPY export/__init__.py export/names.py export/
COPY service/ service/
COPY artifacts/default/bundle/ artifacts/default/bundle/
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TRANSLATOR_HOST=0.0.0.0 \
    TRANSLATOR_PORT=8001 \
    TRANSLATOR_METRICS_PORT=8002 \
    TRANSLATOR_BUNDLE=/app/artifacts/default/bundle
USER translator
EXPOSE 8001 8002
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-m", "service.healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["python", "-m", "service.server"]
