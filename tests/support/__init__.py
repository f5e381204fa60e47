"""Helpers shared by the tests; fixtures live in conftest.py files, and no test module imports another
(tests/test_architecture.py checks it).

corpus       the tiny task and the tiny model's flags
tiny         the tiny model's corpus, checkpoint, bundles and texts; prebuilt for a host without torch
model        a small random PyTorch model, the operators of an ONNX graph
decoding     the one reference decoder (a text decoded alone) and the checks against it
scheduling   a bounded event loop and the one fault hook, `Gate`
polling      the one bounded poll loop, sync (`wait_until`) and async (`until`)
metrics      samples of the Prometheus registry and of a /metrics endpoint
server       in-process server configs and health; server processes, free ports
kserve       TEXT inputs and clients of Triton's own tritonclient
deploy       exported metric names, PromQL, Kubernetes files
image        the CPU image under test (built once by podman), why it cannot run here, the host's answers
docs         what README.md and docs/ state (the example translation, the exact match)
properties   settings of the property-based tests
tools        tools `make test` installs: skip without them, fail under CI
cuda         the kernel classes the installed CUDA provider library instantiates (RTTI names)
pretrained   format-2 bundles of the tiny graphs with SentencePiece / tokenizers files, texts that test
             tokenizers, the tiny graphs' log-probs run without a cache
hf_models    tiny Marian / M2M100 / NLLB Hugging Face checkpoints built offline (tokenizers included)
svg          what an SVG chart holds (its ids and texts), whether a point lies in an axes' view
bundle_search  greedy / beam search over a bundle's graphs, and transformers' generate searching alike
scoring      translations cut at the model's maximum length (Score's end-token rule)
hostile      hostile inputs as hypothesis strategies and the oracles every answer must keep
clean_messages  what a status message must never show (tracebacks, paths, class names)
fuzz         the fuzz driver over the KServe v2 decoders (its command: bench/soak/fuzz.py)
perf_analyzer  Triton's perf_analyzer run against a server: its install, command line and report
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
