"""Per-text limits: source tokens, output tokens and the character bound checked before tokenizing."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from service.domain.errors import InvalidInput
from service.domain.limits import CHAR_SLACK, RequestLimits
from service.domain.types import DecodeOptions
from service.scheduling.scheduler import make_scheduler
from tests.support.scheduling import run


def test_limits_default_to_the_model_and_are_lowered_by_flags(runner):
    own = RequestLimits.of(runner.max_len, runner.longest_token)
    assert (own.max_source_tokens, own.max_output_tokens) == (runner.max_len, runner.max_len - 1)
    longest = max(len(t) for t in Tokenizer.from_file(str(runner.bundle.tokenizer_path)).get_vocab())
    assert own.max_text_chars == runner.max_len * longest * CHAR_SLACK
    lowered = RequestLimits.of(runner.max_len, runner.longest_token, max_source_tokens=7, max_output_tokens=5)
    assert (lowered.max_source_tokens, lowered.max_output_tokens) == (7, 5)
    big = 10 * runner.max_len
    above = RequestLimits.of(runner.max_len, runner.longest_token, max_source_tokens=big,
                             max_output_tokens=big)
    assert (above.max_source_tokens, above.max_output_tokens) == (runner.max_len, runner.max_len - 1)


def test_output_limit_shrinks_the_default_and_refuses_a_larger_explicit_value(runner):
    limits = RequestLimits.of(runner.max_len, runner.longest_token, max_output_tokens=5)
    assert limits.resolve(DecodeOptions()).max_output_tokens == 5
    assert limits.resolve(DecodeOptions(max_output_tokens=3)).max_output_tokens == 3
    with pytest.raises(InvalidInput, match="max_output_tokens 9 exceeds this server's limit of 5"):
        limits.resolve(DecodeOptions(max_output_tokens=9))
    with pytest.raises(InvalidInput, match=f"max_output_tokens must be between 1 and {runner.max_len - 1}"):
        limits.resolve(DecodeOptions(max_output_tokens=runner.max_len))  # beyond the model, whatever the flag


def test_scheduler_enforces_the_limits(runner):
    text = "we 5 the cat"
    n = len(runner.encode_texts([text])[0])
    limits = RequestLimits.of(runner.max_len, runner.longest_token, max_source_tokens=n - 1,
                              max_output_tokens=4)

    async def main() -> tuple[str, str, int]:
        s = make_scheduler("continuous", runner, max_batch_size=4, limits=limits)
        await s.start()
        try:
            with pytest.raises(InvalidInput) as too_long:
                await s.submit([text], DecodeOptions())
            with pytest.raises(InvalidInput) as huge:
                await s.submit(["x" * (limits.max_text_chars + 1)], DecodeOptions())
            [result] = await s.submit(["we 5"], DecodeOptions())
            return str(too_long.value), str(huge.value), len(result.hypotheses[0].tokens)
        finally:
            await s.drain(5)

    too_long, huge, generated = run(main())
    assert f"text 0 is {n} tokens long (incl. eos); this server accepts at most {n - 1}" in too_long
    assert f"characters long: far over the limit of {n - 1} tokens" in huge
    assert generated <= 4
