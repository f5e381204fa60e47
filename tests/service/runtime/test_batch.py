"""The decode batch (service/runtime/decoding/batch.py) under joins, leaves, reuse and failures: every request
decodes exactly as it does alone, in both KV-cache layouts, with the host backend and with the IO-binding
backend (on the CPU device), whose cache never goes through host memory."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from model.data import pad
from model.decoding import beam_search
from service.domain.types import DecodeOptions, FinishedEvent, Hypothesis
from service.runtime.cache.devicemem import DeviceMemory
from service.runtime.cache.kvcache import SOURCE_AXIS_MIN
from service.runtime.decoding.batch import DecodeBatch
from service.runtime.runner import Runner
from tests.support.decoding import MAX_NEW, assert_distinct, assert_same_hypotheses, drain, reference, tokens
from tests.support.scheduling import Gate


# ----- batching ----------------------------------------------------------------------------------
def test_batched_equals_one_by_one_greedy_and_beam(layout_runner, texts):
    ids = layout_runner.encode_texts(texts)
    beam = DecodeOptions(beam_size=4, n_best=3, max_output_tokens=MAX_NEW)
    for o in (DecodeOptions(max_output_tokens=MAX_NEW), beam):
        want = [reference(layout_runner, x, o) for x in ids]
        assert_distinct([[h.tokens for h in hyps] for hyps in want])
        for got, w in zip(layout_runner.translate(ids, o), want, strict=True):
            assert_same_hypotheses(got, w)


def test_mixed_beam_sizes_in_one_batch(layout_runner, tiny_model, texts):
    ids = layout_runner.encode_texts(texts)
    sizes = [1, 3, 2, 4, 1]
    opts = [DecodeOptions(beam_size=k, n_best=k, length_penalty=0.6,
                          max_output_tokens=MAX_NEW) for k in sizes]
    got = layout_runner.translate(ids, opts)
    for hyps, x, o in zip(got, ids, opts, strict=True):
        assert_same_hypotheses(hyps, reference(layout_runner, x, o))
    for x, k, gs in zip(ids, sizes, got, strict=True):
        ref = beam_search(tiny_model, pad([x], 0), MAX_NEW, beam_size=k, n_best=k, alpha=0.6)[0]
        assert [g.tokens for g in gs] == [r.tokens for r in ref]


def test_request_added_midway_matches_alone(layout_runner, texts):
    ids = layout_runner.encode_texts(texts)
    beam = DecodeOptions(beam_size=3, n_best=2, max_output_tokens=MAX_NEW)
    opts = [DecodeOptions(max_output_tokens=MAX_NEW), beam]
    batch = layout_runner.new_batch(16)
    first = [layout_runner.make_request(ids[1], opts[1]), layout_runner.make_request(ids[0], opts[0])]
    batch.add(first)
    out = {}
    for _ in range(3):
        out |= {e.request.id: e.hypotheses for e in batch.step() if isinstance(e, FinishedEvent)}
    assert len(batch) == 2 and batch.shape[1] == 3  # the late rows join a cache that has columns
    late = [layout_runner.make_request(ids[4], opts[0]), layout_runner.make_request(ids[2], opts[1])]
    batch.add(late)
    out |= drain(batch)
    reqs = first + late
    for r in reqs:
        assert_same_hypotheses(out[r.id], reference(layout_runner, r.source, r.options))
    # empty: with a mask S is 0; with source lengths S and the host buffers stay for the next request
    lengths = layout_runner.kv_cache == "inplace"
    assert batch.shape == (0, 0, min(SOURCE_AXIS_MIN, layout_runner.max_len) if lengths else 0)
    again = layout_runner.make_request(ids[3], beam)  # reads buffers its predecessors wrote
    batch.add(again)
    assert_same_hypotheses(drain(batch)[again.id], reference(layout_runner, again.source, beam))


def test_batch_tokens_count_every_rows_source_and_decoded_tokens(layout_runner, texts):
    ids = layout_runner.encode_texts(texts)
    batch = layout_runner.new_batch(8)
    assert batch.tokens == 0
    a = layout_runner.make_request(ids[0], DecodeOptions(max_output_tokens=MAX_NEW))
    b = layout_runner.make_request(ids[1], DecodeOptions(beam_size=2, n_best=1, max_output_tokens=MAX_NEW))
    batch.add(a)
    assert batch.tokens == len(ids[0])
    finished = [e for _ in range(2) for e in batch.step() if isinstance(e, FinishedEvent)]
    batch.add(b)
    finished += [e for e in batch.step() if isinstance(e, FinishedEvent)]
    assert not finished and len(batch) == 2  # (MAX_NEW leaves room for three steps)
    assert batch.tokens == (len(ids[0]) + 3) + 2 * (len(ids[1]) + 1)  # b's two beam rows count twice
    batch.cancel(a)
    assert batch.tokens == 2 * (len(ids[1]) + 1)


def test_a_row_reused_by_a_shorter_source_ignores_the_longer_sources_columns(layout_runner, texts):
    ids = sorted(layout_runner.encode_texts(texts), key=len)
    short, long_ = ids[0], (ids[-1][:-1] * 4)[: layout_runner.max_len - 1] + [ids[-1][-1]]
    opts = DecodeOptions(max_output_tokens=MAX_NEW)
    batch = layout_runner.new_batch(4)
    gone, kept = (layout_runner.make_request(long_, opts) for _ in range(2))  # kept: S stays long
    batch.add([gone, kept])
    batch.cancel(gone)
    req = layout_runner.make_request(short, opts)
    batch.add(req)
    row = batch.rows_of(req)[0]
    stale = [layout_runner.backend.to_host(c)[row, :, len(short):len(long_)] for c in batch._cross.tensors()]
    assert all(np.abs(c).max() > 0 for c in stale)  # a long source's K/V are still there, unzeroed
    got = drain(batch)[req.id]
    ref = layout_runner.new_batch(4)
    again = layout_runner.make_request(short, opts)
    ref.add(again)
    assert_same_hypotheses(got, drain(ref)[again.id])


def test_translate_reuses_the_thread_batch_and_recovers_from_a_failed_call(layout_runner, texts):
    ids = layout_runner.encode_texts(texts)
    opts = [DecodeOptions(beam_size=1 + i % 2, max_output_tokens=MAX_NEW) for i in range(len(ids))]

    def fresh(x: list[int], o: DecodeOptions) -> list[Hypothesis]:
        """Decoded alone in a new batch (not the thread's)."""
        batch = layout_runner.new_batch(64)
        req = layout_runner.make_request(x, o)
        batch.add(req)
        return drain(batch)[req.id]

    want = [fresh(x, o) for x, o in zip(ids, opts, strict=True)]
    assert_distinct(tokens(want))

    def check(got: list[list[Hypothesis]]) -> None:
        for hyps, w in zip(got, want, strict=True):
            assert_same_hypotheses(hyps, w)

    check(layout_runner.translate(ids, opts))
    kept = layout_runner._thread_batch(64)
    check(layout_runner.translate(ids[::-1], opts[::-1])[::-1])  # buffers written by the call before
    assert layout_runner._thread_batch(64) is kept and len(kept) == 0

    layout_runner.fault_hook = Gate(None, fail=lambda stage, n: True)  # every run fails
    try:
        with pytest.raises(RuntimeError, match="injected encoder failure"):
            layout_runner.translate(ids, opts)
    finally:
        layout_runner.fault_hook = None
    assert layout_runner._thread_batch(64) is not kept  # the failed call's batch is not reused
    check(layout_runner.translate(ids, opts))


def test_cancel_frees_rows(layout_runner, texts):
    ids = layout_runner.encode_texts(texts)
    batch = layout_runner.new_batch(8)
    a = layout_runner.make_request(ids[1], DecodeOptions(beam_size=3, max_output_tokens=MAX_NEW))
    b = layout_runner.make_request(ids[0], DecodeOptions(max_output_tokens=MAX_NEW))
    batch.add([a, b])
    assert batch.free_rows == 4 and batch.used_rows == 4
    batch.step()
    assert batch.cancel(a) is True
    assert batch.free_rows == 7 and batch.requests == [b] and batch.rows_of(a) == []
    assert batch.cancel(a) is False
    c = layout_runner.make_request(ids[2], DecodeOptions(beam_size=2, max_output_tokens=MAX_NEW))
    batch.add(c)
    assert set(batch.rows_of(c)) <= {0, 1, 2}  # reuses the freed rows: no new ones
    out = drain(batch)
    assert_same_hypotheses(out[b.id], reference(layout_runner, b.source, b.options))
    assert_same_hypotheses(out[c.id], reference(layout_runner, c.source, c.options))


def test_finished_rows_become_holes_then_get_compacted(layout_runner, texts):
    ids = layout_runner.encode_texts(texts)
    batch = layout_runner.new_batch(8)
    a = layout_runner.make_request(ids[1], DecodeOptions(beam_size=3, max_output_tokens=2))
    b = layout_runner.make_request(ids[0], DecodeOptions(max_output_tokens=MAX_NEW))
    batch.add([a, b])
    assert batch.rows_of(a) == [0, 1, 2] and batch.rows_of(b) == [3]
    # the source axis: the longest source with a mask; with source lengths a power of two >= 64
    # (at most max_len) that does not shrink
    lengths = layout_runner.kv_cache == "inplace"
    assert len(ids[0]) < len(ids[1]) <= SOURCE_AXIS_MIN
    axis = min(SOURCE_AXIS_MIN, layout_runner.max_len) if lengths else len(ids[1])
    assert batch.shape == (4, 0, axis)
    batch.step()
    (done,) = batch.step()
    assert done.request is a and len(done.hypotheses[0].tokens) == 2
    assert done.hypotheses[0].finish_reason == "length"
    # 3 holes of 4 rows: b moved to row 0; with a mask, the source axis shrank to b's length
    assert batch.rows_of(b) == [0] and batch.shape == (1, 2, axis if lengths else len(ids[0]))
    assert_same_hypotheses(drain(batch)[b.id], reference(layout_runner, b.source, b.options))


def test_continuous_churn_through_a_small_batch(layout_runner, texts):
    ids = layout_runner.encode_texts(texts) * 3
    opts = [DecodeOptions(beam_size=1 + i % 3, n_best=1,
                          max_output_tokens=MAX_NEW - i) for i in range(len(ids))]
    want = [reference(layout_runner, x, o) for x, o in zip(ids, opts, strict=True)]
    assert_distinct([[h.tokens for h in hyps] for hyps in want])
    for got, w in zip(layout_runner.translate(ids, opts, max_rows=4), want, strict=True):
        assert_same_hypotheses(got, w)


def test_fault_hook_fails_a_step_without_corrupting_the_batch(layout_runner, texts):
    ids = layout_runner.encode_texts(texts)
    batch = layout_runner.new_batch(8)
    req = layout_runner.make_request(ids[3], DecodeOptions(beam_size=2, max_output_tokens=MAX_NEW))
    batch.add(req)
    batch.step()
    before = batch.shape

    layout_runner.fault_hook = Gate(None, fail=lambda stage, n: True)  # every run fails
    try:
        with pytest.raises(RuntimeError, match="injected decoder failure"):
            batch.step()
        with pytest.raises(RuntimeError, match="injected encoder failure"):
            batch.add(layout_runner.make_request(ids[0]))
    finally:
        layout_runner.fault_hook = None
    assert batch.shape == before and batch.requests == [req]
    assert_same_hypotheses(drain(batch)[req.id], reference(layout_runner, req.source, req.options))


# ----- the IO-binding backend's device cache -----------------------------------------------------
def joins_leaves_and_beams(runner: Runner, batch: DecodeBatch, ids: list[list[int]],
                           steps: list[list[int]] | None = None) -> dict[int, list[Hypothesis]]:
    """Requests joining, leaving, cancelled and beam-searched in one batch; the results by position.

    Three requests (a beam of 3, two greedy), three steps, one cancelled, two more joining (greedy and a
    beam), then decoded to the end. `steps` gets the data pointers of the in-place self-attention cache
    tensors before and after a step on which no row joins or leaves.
    """
    beam = DecodeOptions(beam_size=3, n_best=2, max_output_tokens=MAX_NEW)
    greedy = DecodeOptions(max_output_tokens=MAX_NEW)
    reqs = [runner.make_request(ids[1], beam), runner.make_request(ids[0], greedy),
            runner.make_request(ids[3], greedy), runner.make_request(ids[4], greedy),
            runner.make_request(ids[2], beam)]
    batch.add(reqs[:3])
    for _ in range(3):
        batch.step()
    assert batch.cancel(reqs[2]) is True  # leaves mid-decode
    batch.add(reqs[3:])  # join a cache that has columns
    if steps is not None:
        past = batch._cache.past()
        steps.append([t.data_ptr() for t in past])
        assert not any(isinstance(e, FinishedEvent) for e in batch.step())
        assert batch._cache.past() == past  # the same views, bound again as they are
        steps.append([t.data_ptr() for t in batch._cache.past()])
    out = drain(batch)
    return {i: out[r.id] for i, r in enumerate(reqs) if r.id in out}


@pytest.mark.parametrize("layout", ["inplace", "concat"])
def test_the_device_cache_never_goes_through_host_memory(layout, tiny_bundle, tiny_concat_bundle, texts,
                                                         monkeypatch):
    """After its first run, a device cache moves no KV-cache tensor between host and device memory.

    Once the buffers and the zeros new ones are filled from exist, joins, leaves, cancellations,
    compaction and beam reorders move no 4-D tensor through host memory, decode token-identically to the
    host backend, and the in-place self-attention cache keeps its buffers across a step on which no row
    changes.
    """
    bundle = tiny_bundle if layout == "inplace" else tiny_concat_bundle
    host = Runner(bundle, providers=["CPUExecutionProvider"])
    bound = Runner(bundle, providers=["CPUExecutionProvider"], io_binding=True)
    assert isinstance(bound.backend.memory, DeviceMemory) and bound.backend.memory.transfer == "memmove"
    ids = host.encode_texts(texts)
    want = joins_leaves_and_beams(host, host.new_batch(16), ids)
    assert_distinct([[h.tokens for h in hyps] for hyps in want.values()])
    batch = bound.new_batch(16)
    joins_leaves_and_beams(bound, batch, ids)  # the first run allocates

    calls: list[tuple[str, int]] = []

    def spy(owner: type, name: str, ndim) -> None:
        """Wrap owner.name to record each call: its name and the rank of the tensor it moves."""
        original = getattr(owner, name)

        def call(*args, **kwargs):
            calls.append((name, ndim(*args)))
            return original(*args, **kwargs)
        monkeypatch.setattr(owner, name, call)

    spy(ort.OrtValue, "numpy", lambda v: len(v.shape()))  # device -> host
    spy(ort.OrtValue, "update_inplace", lambda v, a: a.ndim)  # host -> device
    spy(ort.OrtValue, "ortvalue_from_numpy", lambda a, *_: a.ndim)  # host -> device
    spy(DeviceMemory, "zeros", lambda m, shape, dtype: len(shape))  # a new buffer
    steps: list[list[int]] = []
    got = joins_leaves_and_beams(bound, batch, ids, steps if layout == "inplace" else None)
    assert calls, "nothing was spied on"
    uploads = [c for c in calls if c[0] == "update_inplace"]  # cache rows or the zeros new buffers copy
    assert not uploads and ("numpy", 4) not in calls and ("ortvalue_from_numpy", 4) not in calls, calls
    if layout == "inplace":
        assert ("zeros", 4) not in calls  # the buffers of the first run have the capacity
        assert steps[0] == steps[1]  # written in place: the same device buffers
    assert got.keys() == want.keys()
    for i, hyps in want.items():
        assert_same_hypotheses(got[i], hyps)
