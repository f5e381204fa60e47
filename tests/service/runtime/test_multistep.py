"""Several greedy steps per ONNX Runtime run (service/runtime/stepping.py): the same hypotheses as one
step per run, in every way a batch is driven."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from service.domain.types import DecodeOptions, FinishedEvent, FinishReason, TokenEvent
from service.runtime.rules import StepRules
from service.runtime.runner import Runner
from service.runtime.stepping import SINGLE_STEP, StepPolicy
from tests.support.decoding import MAX_NEW, assert_distinct, drain, reference


def same(a, b) -> None:
    """Hypotheses equal in tokens, text, finish reason, and log-prob and score to the float32 bit."""
    def key(hyps):
        return [(h.tokens, h.text, h.finish_reason, np.float32(h.log_prob), h.score) for h in hyps]

    assert key(a) == key(b)


@pytest.fixture(scope="module", params=["host", "bound"])
def multi(request, tiny_bundle) -> Runner:
    """A runner taking up to 4 steps per run, with the host backend and the IO-binding backend."""
    r = Runner(tiny_bundle, providers=["CPUExecutionProvider"], io_binding=request.param == "bound",
               step_policy=StepPolicy(4))
    assert r.backend.multistep
    return r


class Counting:
    """A fault hook that counts decoder runs."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, stage: str) -> None:
        self.runs += stage == "decoder"


def test_policy_steps():
    """Several steps only when allowed: K, the row limit (0 = any), what the requests still need."""
    assert StepPolicy(8).steps(rows=64, left=100) == 8
    assert StepPolicy(8).steps(rows=1, left=3) == 3
    assert StepPolicy(8, max_rows=2).steps(rows=3, left=100) == 1
    assert StepPolicy(8, max_rows=2).steps(rows=2, left=100) == 8
    assert StepPolicy(8).steps(rows=1, left=0) == 1
    assert SINGLE_STEP.steps(rows=1, left=100) == 1
    assert StepPolicy(8, max_rows=2).allows(2) and not StepPolicy(8, max_rows=2).allows(3)
    assert StepPolicy(8).allows(500) and not SINGLE_STEP.allows(1)
    with pytest.raises(ValueError, match="steps_per_call"):
        StepPolicy(0)


def test_default_runner_takes_one_step_per_run(runner):
    """The default policy is one step per run: the multi-step decoder is not even opened."""
    assert runner.step_policy == SINGLE_STEP and not runner.backend.multistep


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_translate_equals_single_steps(multi, runner, texts, rows):
    """Static batches of 1, 2 and 5 rows: hypotheses equal one step per run's, in fewer decoder runs."""
    counting = multi.fault_hook = Counting()
    try:
        got = multi.translate(texts, DecodeOptions(max_new_tokens=MAX_NEW), max_rows=rows)
    finally:
        multi.fault_hook = None
    want = [reference(runner, t, DecodeOptions(max_new_tokens=MAX_NEW)) for t in texts]
    for g, w in zip(got, want, strict=True):
        same(g, w)
    assert_distinct([w[0].tokens for w in want])
    tokens = sum(len(w[0].tokens) + 1 for w in want)
    assert counting.runs < tokens / 2  # several steps per run


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 9])
def test_length_limits_inside_a_run(multi, runner, texts, limit):
    """A request whose max_new_tokens ends inside a run stops there (LENGTH), as with single steps."""
    opts = DecodeOptions(max_new_tokens=limit)
    got = multi.translate(texts, opts, max_rows=8)
    for text, g in zip(texts, got, strict=True):
        same(g, reference(runner, text, opts))
    assert any(g[0].finish_reason is FinishReason.LENGTH for g in got) or limit > 5


def test_alignment_and_streaming(multi, runner, texts):
    """Alignments equal single steps'; a streaming request gets every token, its pieces make its text."""
    batch = multi.new_batch(8)
    opts = DecodeOptions(max_new_tokens=MAX_NEW, with_alignment=True, stream=True)
    requests = [multi.make_request(t, opts) for t in texts]
    batch.add(requests)
    streamed: dict[int, list[int]] = {r.id: [] for r in requests}
    done = {}
    for _ in range(200):
        for e in batch.step():
            if isinstance(e, TokenEvent):
                streamed[e.request.id].append(e.token)
            elif isinstance(e, FinishedEvent):
                done[e.request.id] = e.hypotheses
        if not len(batch):
            break
    for r, text in zip(requests, texts, strict=True):
        want = reference(runner, text, DecodeOptions(max_new_tokens=MAX_NEW, with_alignment=True))
        same(done[r.id], want)
        assert streamed[r.id] == want[0].tokens
        np.testing.assert_allclose(done[r.id][0].alignment, want[0].alignment, atol=1e-6)


def test_requests_join_and_leave_between_runs(multi, runner, texts):
    """Continuous batching: a request joins after others took a run, one is cancelled, one has beams
    (the batch then takes single steps); every finished request equals its reference."""
    batch = multi.new_batch(16)
    greedy = DecodeOptions(max_new_tokens=MAX_NEW)
    first = [multi.make_request(t, greedy) for t in texts[:2]]
    batch.add(first)
    batch.step()
    assert batch.shape[1] >= 2  # the first run took several steps
    late = multi.make_request(texts[2], greedy)
    gone = multi.make_request(texts[3], greedy)
    beam = multi.make_request(texts[4], DecodeOptions(max_new_tokens=MAX_NEW, beam_size=3))
    batch.add([late, gone])
    batch.step()
    assert batch.cancel(gone)
    batch.add([beam])
    out = drain(batch)
    for r, text in ((first[0], texts[0]), (first[1], texts[1]), (late, texts[2])):
        same(out[r.id], reference(runner, text, greedy))
    same(out[beam.id], reference(runner, texts[4], DecodeOptions(max_new_tokens=MAX_NEW, beam_size=3)))
    assert gone.id not in out


def test_rules_keep_the_host_in_the_loop(multi, texts):
    """A per-step rule means one step per run; eos at the limit stops a run before the last step."""
    batch = multi.new_batch(4)
    batch.add([multi.make_request(texts[1], DecodeOptions(max_new_tokens=MAX_NEW))])
    assert batch._steps_now() == 4
    spec = batch.spec
    batch.spec = dataclasses.replace(spec, rules=StepRules(suppress=(5,)))
    assert batch._steps_now() == 1
    batch.spec = dataclasses.replace(spec, rules=StepRules(eos_at_limit=True))
    limited = multi.new_batch(4)
    limited.spec = batch.spec
    limited.add([multi.make_request(texts[1], DecodeOptions(max_new_tokens=3))])
    assert limited._steps_now() == 2  # the third token is the limit's, which the host must see
    limited.add([multi.make_request(texts[0], DecodeOptions(max_new_tokens=1))])
    assert limited._steps_now() == 1
