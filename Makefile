# Two commands for a newcomer: `make serve` and `make test`. Each sets up .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TRAIN_MINUTES ?= 300  # training budget of `make train-default` (a resume counts what was already spent)

.PHONY: setup serve test test-kernels prometheus-tools perf-analyzer-tools image-tools image-check lint protos bench bench-quick charts gpu-check gpu-kit soak fuzz corpus train-default evaluate-default default-bundle clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[train,serve,dev,bench]'
	touch $@

# The gRPC server on 127.0.0.1:8001 (metrics on :8002) with the default bundle; flags and their
# TRANSLATOR_* environment variables: `$(PY) -m service.server --help`.
serve: $(STAMP) protos
	$(PY) -m service.server

# Python modules generated from protos/**/*.proto (not committed; skipped when up to date).
protos: $(STAMP)
	$(PY) -m protos.generate

# The monitoring test (tests/deploy/test_prometheus.py) runs a real Prometheus: Debian's package (the
# server and promtool; installed once, not started as a service).
prometheus-tools:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  $$sudo apt-get update -q && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; }

# The image tests (tests/deploy/test_image*.py) and `make image-check` build and run the CPU image with
# podman on the runc runtime, on a Debian bookworm base that debootstrap makes (Debian's packages; installed
# once). Where podman cannot run containers the image tests skip, saying why in one line.
image-tools:
	@command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null || { \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  $$sudo apt-get update -q && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends podman runc \
	    debootstrap; }

# The CPU image built and checked (deploy/image, docs/deployment.md): the base (cached in runs/image), the
# build (layers reused), the seconds from `podman run` to SERVING over 3 starts, then the image tests against
# it; the last line printed is a JSON object of figures (image size total and per layer, build and ready
# seconds, checks passed). Exit code 0 when every check passed.
IMAGE_TESTS := tests/deploy/test_image.py tests/deploy/test_image_manifests.py
image-check: $(STAMP) protos image-tools
	$(PY) -m deploy.image $(IMAGE_TESTS)

# `make test` also installs perf_analyzer (below), Debian's prometheus and the image tools (above), so that
# no test is skipped.
# Beside the suite (its output in KERNELS_LOG, whose summary is printed at the end) it runs
# test-kernels: the tests whose models PyTorch trains or builds, again under other CPU kernels. It
# fails if either run fails.
KERNELS_LOG := runs/test-kernels.log
test: $(STAMP) protos prometheus-tools perf-analyzer-tools image-tools
	@mkdir -p $(dir $(KERNELS_LOG)); \
	$(PY) -m tests.support.kernels > $(KERNELS_LOG) 2>&1 & kernels=$$!; \
	trap 'kill $$kernels 2>/dev/null' INT TERM; \
	$(PY) -m pytest -m "not slow"; suite=$$?; \
	wait $$kernels; again=$$?; \
	echo "--- test-kernels (beside the suite; its whole output: $(KERNELS_LOG))"; \
	grep -m1 "^PyTorch CPU kernels" $(KERNELS_LOG); \
	sed -n '/short test summary info/,$$p' $(KERNELS_LOG) | grep -v "^SKIPPED" || tail -n 30 $(KERNELS_LOG); \
	exit $$(( suite != 0 ? suite : again ))

# The tests marked `kernels` (they train or read a model PyTorch made) again, their fixtures rebuilt,
# with PyTorch held to another family of CPU kernels: AVX2 where it picks AVX-512, the default kernels
# otherwise (tests/support/kernels.py, docs/testing.md), and the tests marked `slow`. The suite must not
# depend on which kernels ran.
test-kernels: $(STAMP) protos
	$(PY) -m tests.support.kernels

# Benchmarks (docs/performance.md): engines, server batching modes, scaling and memory; the last
# line printed is a JSON object of throughput ratios. Chart records (JSON) and their SVG charts go to
# runs/bench (runs/bench-quick). perf_analyzer (below) is installed first: the server benchmarks load
# the server with it as well as with bench/common/loadgen.py. bench/README.md lists every benchmark command.
bench: $(STAMP) protos perf-analyzer-tools
	$(PY) -m bench

bench-quick: $(STAMP) protos perf-analyzer-tools
	$(PY) -m bench --quick

# Many models in one server (bench/repository, docs/performance.md): two models in one process against two
# single-model processes, the cold on-demand load beside CTranslate2's, 20 load/unload cycles under load,
# perf_analyzer against one named model of several; the opus-mt-shaped bundle of `python -m bench.marian`
# too where it exists. The last line printed is a JSON object of ratios and counts; the results and the
# cycles' RSS chart go to runs/bench-repository (REPOSITORY_ARGS=--quick: runs/bench-repository-quick).
REPOSITORY_ARGS ?=
.PHONY: bench-repository
bench-repository: $(STAMP) protos perf-analyzer-tools
	$(PY) -m bench.repository $(REPOSITORY_ARGS)

# The docs' charts (docs/charts/*.svg) redrawn from their records (docs/charts/records/*.json: what the
# last runs measured, with the command, machine and date), measuring nothing. A run's record
# (runs/bench/server.json, runs/soak/soak-rss.json, ...) copied there replaces the one it updates.
charts: $(STAMP)
	$(PY) -m bench.charts

# On a machine with an NVIDIA GPU: the GPU test tier (`pytest -m gpu`, required to run: no skipping),
# then the GPU benchmark (bench/gpu: the opus-mt-shaped model, engine fp16 / fp32 at batch 1, 32, 128,
# server at concurrency 1, 32, 128, CTranslate2 on CUDA when it loads, memory, bandwidth floor); target
# under 8 minutes on one GPU, --quick under 4 (docs/testing.md).
# - Online (no KIT): the driver only; the `cuda` extra brings CUDA 13 and cuDNN 9 from PyPI.
# - Offline (KIT=DIR, the folder of a kit's parts and manifest.json that `make gpu-kit` made): no
#   network; $(PYTHON) must be the kit's Python. The parts are verified and joined, the packages
#   installed with --no-index into DIR/venv, and the log, summary.json, the tier's JUnit XML and
#   bench-gpu.json written to GPU_OUT.
GPU_OUT ?= runs/gpu-check
ifdef KIT
gpu-check:
	$(PYTHON) -m gpukit check --kit $(KIT) --out $(GPU_OUT) -- $(GPU_BENCH_ARGS)
else
gpu-check: $(STAMP) protos
	$(PY) -m pip install -q -e '.[cuda]'
	TRANSLATOR_REQUIRE_GPU=1 $(PY) -m pytest -m gpu
	$(PY) -m bench.gpu $(GPU_BENCH_ARGS)
endif

# The offline kit of `make gpu-check KIT=...`, made on a machine with registry access: wheels for
# CPython KIT_PYTHON on KIT_PLATFORM (onnxruntime-gpu and what the project and its tests need), the
# generated gRPC modules and the GPU tier's fixtures, in parts of at most PART_MIB MiB with their
# sha256 in KIT_OUT/manifest.json. KIT_CUDA=1 adds NVIDIA's CUDA 13 / cuDNN 9 / cuBLAS wheels (several
# GB) for a host whose only CUDA piece is the driver. KIT_FIXTURES=DIR takes the fixtures from a directory
# that `python -m tests.support.tiny DIR` wrote instead of training the tiny model again.
KIT_OUT ?= .gpu-kit
KIT_PYTHON ?= 3.12
KIT_PLATFORM ?= manylinux_2_28_x86_64
PART_MIB ?= 20
KIT_OPUS ?= full
gpu-kit: $(STAMP) protos
	$(PY) -m gpukit build --out $(KIT_OUT) --python $(KIT_PYTHON) --platform $(KIT_PLATFORM) \
	  --part-mib $(PART_MIB) --opus-mt $(KIT_OPUS) $(if $(KIT_CUDA),--with-cuda-libraries) \
	  $(if $(KIT_FIXTURES),--fixtures $(KIT_FIXTURES))

# Soak with faults (bench/soak, docs/reliability.md): 10,000 requests of every kind, valid and
# hostile, against a server on the default bundle, every 2000th decoder step failing; about 10 min
# on 2 cores. Exit code 0 when nothing was lost, duplicated, late or wrong.
SOAK_ARGS ?= --requests 10000 --concurrency 32 --inject-every 2000
soak: $(STAMP) protos
	$(PY) -m bench.soak $(SOAK_ARGS)

# Fuzz the KServe v2 BYTES decoder and request decoding with hypothesis, and a real server's management
# surfaces (bench/soak/fuzz.py, docs/reliability.md); the last line printed is a JSON summary, exit
# code 1 on a failure.
FUZZ_ARGS ?= --seconds 600 --management
fuzz: $(STAMP) protos
	$(PY) -m bench.soak.fuzz $(FUZZ_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

# The default corpus (deterministic from its seed; rebuilt when its generator changes): train, valid,
# test, probe and near-miss splits (textnorm/corpus.py) and the five training supplements.
CORPUS_CODE := textnorm/corpus.py textnorm/frames.py textnorm/sampling.py textnorm/verbalize.py \
  textnorm/readers.py textnorm/everyday.py textnorm/literal.py textnorm/alone.py

corpus: data/corpus/train.tsv

data/corpus/train.tsv: $(CORPUS_CODE) | $(STAMP)
	$(PY) -m textnorm.corpus --out data/corpus --train 400000 --numbers 100000 --probe 400 --long 150000 \
	  --copy 150000 --literal 200000 --nearmiss 2000 --alone 100000

# The default model's next training stage: from the shipped model.pt with `--init` (its weights,
# config and tokenizer; a fresh optimizer and schedule), as each of its six stages started from the
# last one's weights (docs/model.md), on the corpus and its six supplements with the sixth stage's
# recipe. Resumable: running it again continues from runs/default/last.pt (ignored, not committed).
# Its learning curve, every stage before it included, is drawn to runs/default/learning-curve.svg.
train-default: corpus
	$(PY) -m model.train --init artifacts/default/model.pt --train data/corpus/train.tsv \
	  data/corpus/numbers.tsv data/corpus/long.tsv data/corpus/copy.tsv data/corpus/literal.tsv \
	  data/corpus/alone.tsv \
	  --valid data/corpus/valid.tsv \
	  --out runs/default --max-tokens 3000 --warmup 200 --lr-scale 0.2 --cooldown-from 1500 \
	  --cooldown-steps 6500 --max-steps 8000 --eval-every 1000 --eval-size 500 \
	  --max-minutes $(TRAIN_MINUTES) --threads 2 \
	  --earlier-metrics artifacts/default/metrics.stage1.jsonl artifacts/default/metrics.stage2.jsonl \
	  artifacts/default/metrics.stage3.jsonl artifacts/default/metrics.stage4.jsonl \
	  artifacts/default/metrics.stage5.jsonl artifacts/default/metrics.jsonl

# Exact match overall and by class on the test split, the probe of round and zero-heavy numbers, the
# near-miss split (its figure: outside_unchanged, the sentences whose text outside the classes is kept)
# and the larger held-out split (textnorm/heldout.py: the test split's stream drawn 10,000 pairs further).
evaluate-default: corpus
	$(PY) -m model.evaluate --checkpoint artifacts/default/model.pt --split data/corpus/test.tsv
	$(PY) -m model.evaluate --checkpoint artifacts/default/model.pt --split data/corpus/probe.tsv
	$(PY) -m model.evaluate --checkpoint artifacts/default/model.pt --split data/corpus/nearmiss.tsv
	$(PY) -m textnorm.heldout --corpus data/corpus --n 10000
	$(PY) -m model.evaluate --checkpoint artifacts/default/model.pt --split data/corpus/test_ext.tsv

# Re-export the shipped bundle from the committed checkpoint (verified against PyTorch).
default-bundle: $(STAMP)
	$(PY) -m export --checkpoint artifacts/default/model.pt --out artifacts/default/bundle --fp16 \
	  --test-split artifacts/default/test_sample.tsv --eval-size 500 --force

# Triton's perf_analyzer against the server (bench/server/perf_analyzer.py: default bundle, concurrency
# 1..64; PERF_ANALYZER_ARGS=--quick for a short run, --loadgen to compare with bench/common/loadgen.py).
# The binary comes from the tritonclient 2.41.1 wheel, installed with the CUDA runtime library it
# links against (loaded even without a GPU) into .tools/perf_analyzer, apart from the project's
# own tritonclient; it also needs Debian's libb64-0d. Installed once.
PERF_ANALYZER := .tools/perf_analyzer/bin/perf_analyzer

$(PERF_ANALYZER): | $(STAMP)
	$(PY) -m pip install -q --target .tools/perf_analyzer --no-deps tritonclient==2.41.1 \
	  nvidia-cuda-runtime-cu12==12.9.79
	touch $@

perf-analyzer-tools: $(PERF_ANALYZER)
	@dpkg -s libb64-0d >/dev/null 2>&1 || { \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  $$sudo apt-get update -q && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libb64-0d; }

.PHONY: perf-analyzer
perf-analyzer: $(STAMP) protos perf-analyzer-tools
	$(PY) -m bench.server.perf_analyzer $(PERF_ANALYZER_ARGS)

# HTTP/REST against gRPC on one server: perf_analyzer -i http and -i grpc at concurrency 1 and 64
# (issue 33's benchmark; HTTP_ARGS=--quick for a short run), then latency against throughput per
# protocol at concurrency 1 to 64 (bench/protocols: gRPC, KServe v2 gRPC, HTTP infer and generate, one
# server), its record and chart to runs/bench-http (PROTOCOLS_ARGS=--quick for a short run).
HTTP_ARGS ?=
PROTOCOLS_ARGS ?=
.PHONY: bench-http
bench-http: $(STAMP) protos perf-analyzer-tools
	$(PY) -m bench.server.http_overhead $(HTTP_ARGS)
	$(PY) -m bench.protocols --out runs/bench-http $(PROTOCOLS_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# Score (forced decoding) throughput against greedy translation throughput, same pairs, one run
# (bench/engines/scoring.py; the default model, CPU, a minute or so).
.PHONY: bench-scoring
bench-scoring: $(STAMP) protos
	$(PY) -m bench.engines.scoring --pairs 128 --repeat 3

# What controlled decoding costs a decode step (bench/engines/controls.py, docs/performance.md): rows with no
# option against rows with repetition penalty + no-repeat n-grams, and with seeded sampling, at batch 32.
.PHONY: bench-controls
bench-controls: $(STAMP)
	$(PY) -m bench.engines.controls $(CONTROLS_ARGS)
