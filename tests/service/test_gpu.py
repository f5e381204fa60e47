"""The GPU tier (`pytest -m gpu`, run by `make gpu-check`): the service on ONNX Runtime's CUDA provider.

Skipped where no CUDA device can be opened, a usage error instead under TRANSLATOR_REQUIRE_GPU=1
(tests/conftest.py). Checks what no CPU run can: every compute node of the fp16 variant placed on
CUDA, the self-attention cache updated in place in device memory (same data pointer in and out,
only the new column written), tokens as the CPU fp32 run gives them (fp16 within the tolerance of
tests/service/runtime/test_runner.py: identical greedy tokens, log-probs within 0.05, except at the
documented fp16 near-ties, where float32's own token leads by at most 0.1), requests joining,
leaving and cancelled mid-decode as decoded alone (near-ties allowed likewise: another batch shape
runs other fp16 kernels), and a real server reporting CUDA.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.types import DecodeOptions, FinishedEvent
from service.runtime.cache.backends import IoBindingBackend
from service.runtime.model import sessions as sessions_module
from service.runtime.model.sessions import CUDA, misplaced_nodes
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.decoding import (
    FP16_TIE_MARGIN,
    MAX_NEW,
    assert_same_hypotheses,
    assert_same_or_near_tie,
    drain,
    forced_log_prob,
    reference,
)
from tests.support.server import TEXTS, server_config

pytestmark = pytest.mark.gpu

FP16_LOGPROB_ATOL = 0.05  # fp16 against fp32, as the CPU fp16 test allows


@pytest.fixture(scope="module")
def cuda_runner(tiny_bundle) -> Runner:
    """The tiny bundle on CUDA as the server loads it by default (fp16 variant), CUDA required."""
    return Runner(tiny_bundle, require_provider=CUDA)


def test_every_compute_node_of_the_fp16_variant_is_on_cuda(cuda_runner):
    assert cuda_runner.provider == CUDA and cuda_runner.variant_name == "fp16"
    assert isinstance(cuda_runner.backend, IoBindingBackend) and cuda_runner.backend.device == "cuda"
    files = cuda_runner.bundle.files("fp16")
    sessions = cuda_runner.sessions
    for graph, session in (("encoder", sessions.encoder), ("decoder", sessions.decoder)):
        host = cuda_runner.bundle.host_nodes.get(files[graph].name, ())
        assert misplaced_nodes(session, CUDA, host) == [], graph


def test_greedy_and_beam_give_the_tokens_of_the_cpu_fp32_run(cuda_runner, runner, texts):
    """Identical tokens, log-probs within fp16's tolerance, except at the documented fp16 near-ties:
    greedy parts only where float32's own token leads by at most FP16_TIE_MARGIN, beam search only
    for a best hypothesis float32 scores within it."""
    ids = runner.encode_texts(texts)
    greedy, beam = DecodeOptions(max_output_tokens=MAX_NEW), DecodeOptions(beam_size=4,
                                                                           max_output_tokens=MAX_NEW)
    for options in (greedy, beam):
        on_gpu, on_cpu = cuda_runner.translate(ids, options), runner.translate(ids, options)
        assert len({tuple(h[0].tokens) for h in on_cpu}) > 1  # the reference is not one output for all
        identical = 0
        for source, g, c in zip(ids, on_gpu, on_cpu, strict=True):
            if options is greedy:
                same = assert_same_or_near_tie(runner, source, g[0].tokens, c[0].tokens)
            elif not (same := g[0].tokens == c[0].tokens):
                score = [forced_log_prob(runner, source, h[0].tokens) for h in (c, g)]
                assert score[0] - score[1] <= FP16_TIE_MARGIN, (g[0].tokens, c[0].tokens, score)
            if same:
                identical += 1
                assert g[0].log_prob == pytest.approx(c[0].log_prob, abs=FP16_LOGPROB_ATOL)
        assert identical >= len(ids) - 1, f"{identical} of {len(ids)} identical"  # near-ties are rare


def test_the_self_attention_cache_is_written_in_place_in_device_memory(cuda_runner, runner, texts):
    """Across a decoder step the cache buffers keep their device address, and of each row only the
    column of its new token changes. The rows are texts whose decoding runs well past the measured
    step, and the step is checked to finish none (a finished row leaves the cache and moves others)."""
    options, before = DecodeOptions(max_output_tokens=MAX_NEW), 3
    long = [t for t in texts if len(reference(runner, t, options)[0].tokens) > before + 4][:3]
    assert len(long) >= 2, "too few texts decode past the measured step"
    batch = cuda_runner.new_batch(4)
    batch.add([cuda_runner.make_request(t, options) for t in long])
    for _ in range(before):
        assert not [e for e in batch.step() if isinstance(e, FinishedEvent)]
    cache = batch._cache  # the self-attention cache (service/runtime/cache/kvcache.py)
    before_ptrs = [t.data_ptr() for t in cache.past()]
    lengths = cache.filled().copy()
    old = [cuda_runner.backend.to_host(t) for t in cache.past()]
    finished = [e for e in batch.step() if isinstance(e, FinishedEvent)]
    assert not finished and len(batch) == len(long), "a row finished during the measured step"
    new = [cuda_runner.backend.to_host(t) for t in cache.past()]
    assert [t.data_ptr() for t in cache.past()] == before_ptrs
    for a, b in zip(old, new, strict=True):
        for row, length in enumerate(lengths):
            changed = np.flatnonzero((a[row] != b[row]).any(axis=(0, 2)))  # columns that changed
            assert changed.tolist() == [length], (row, length, changed)


def test_requests_joining_leaving_and_cancelled_mid_decode_decode_as_alone(cuda_runner, runner, texts):
    ids = cuda_runner.encode_texts(texts)
    beam = DecodeOptions(beam_size=3, n_best=2, max_output_tokens=MAX_NEW)
    greedy = DecodeOptions(max_output_tokens=MAX_NEW)
    batch = cuda_runner.new_batch(16)
    first = [cuda_runner.make_request(ids[1], beam), cuda_runner.make_request(ids[0], greedy),
             cuda_runner.make_request(ids[3], greedy)]
    batch.add(first)
    for _ in range(3):
        batch.step()
    assert batch.cancel(first[2]) is True  # leaves mid-decode
    late = [cuda_runner.make_request(ids[4], greedy), cuda_runner.make_request(ids[2], beam)]
    batch.add(late)  # joins a cache that already has columns
    out = drain(batch)
    for request in [*first[:2], *late]:
        want, got = reference(cuda_runner, request.source, request.options), out[request.id]
        if request.options.beam_size == 1 and not assert_same_or_near_tie(runner, request.source,
                                                                          got[0].tokens, want[0].tokens):
            continue  # another batch shape, other fp16 kernels: a near-tie flipped
        assert_same_hypotheses(got, want, rtol=1e-3, atol=1e-3)


def test_a_server_with_default_flags_reports_cuda(tiny_bundle):
    config = server_config(tiny_bundle, providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
                           require_provider=CUDA)
    with BackgroundServer(config) as server, grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=30)
        assert info.execution_providers[0] == CUDA and info.variant == "fp16"
        reply = stub.Translate(pb.TranslateRequest(texts=TEXTS), timeout=60)
        assert len(reply.results) == len(TEXTS) and all(r.hypotheses[0].token_ids for r in reply.results)


def test_two_models_on_cuda_share_one_device_arena(cuda_runner, tiny_bundle, texts, tmp_path):
    """A repository of two models on one GPU: every session takes device memory from the one arena
    registered with ONNX Runtime's environment, and each model decodes as the tiny bundle alone does."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "1").symlink_to(tiny_bundle.resolve(), target_is_directory=True)
    config = server_config(tiny_bundle, providers=(CUDA, "CPUExecutionProvider"), require_provider=CUDA,
                           model_repository=tmp_path, model_control_mode="explicit", load_model=("*",))
    want = cuda_runner.translate(texts, DecodeOptions(max_output_tokens=MAX_NEW))
    with BackgroundServer(config) as server:
        assert sessions_module._cuda_allocators == {0: True}  # registered once, for device 0
        for name, versions in server.running.models.models.items():
            opened = versions[1].runner.sessions
            for session in (opened.encoder, opened.decoder):
                options = session.get_session_options()
                assert options.get_session_config_entry(sessions_module.USE_ENV_ALLOCATORS) == "1", name
            got = versions[1].runner.translate(texts, DecodeOptions(max_output_tokens=MAX_NEW))
            assert [g[0].tokens for g in got] == [w[0].tokens for w in want], name
