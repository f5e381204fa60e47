"""The server's flags as ceilings of a model's settings (service/models/layout.py `Ceilings`, applied by the
repository at every load): a load's config and the model's settings file may lower a limit, never raise
it; and settings JSON nested past any use is refused as invalid input, never a RecursionError."""

from __future__ import annotations

import asyncio
import json

import pytest

from service.domain.errors import InvalidInput
from service.domain.text import shown
from service.models.layout import (
    LOAD_ORIGIN,
    MAX_DEPTH,
    Ceilings,
    ModelEntry,
    ModelSettings,
    RepositoryLayout,
)
from service.models.repository import ControlMode
from service.models.served import ModelState
from tests.support.repository import make

SERVER = Ceilings(max_batch_size=32, max_batch_tokens=2048, queue_size=256, max_queue_delay_ms=5.0)


def entry(**own: object) -> ModelEntry:
    """Model `m` whose settings file says `own`."""
    return ModelEntry("m", {}, ModelSettings.from_json(own))


@pytest.mark.parametrize(("key", "value", "flag", "limit"), [
    ("queue_size", 1e9, "--queue-size", "256"),
    ("max_batch_size", 33, "--max-batch-size", "32"),
    ("max_batch_tokens", 4096, "--max-batch-tokens", "2048"),
    ("max_queue_delay_ms", 5.5, "--max-queue-delay-ms", "5.0"),
])
def test_a_setting_above_the_servers_flag_is_refused_naming_it(key, value, flag, limit):
    shown_value = str(int(value)) if key != "max_queue_delay_ms" else str(value)
    message = f"{key} {shown_value} exceeds this server's {flag} {limit}"
    with pytest.raises(InvalidInput) as err:
        SERVER.bound(entry(), ModelSettings.from_json({key: value}))
    assert str(err.value) == f"{LOAD_ORIGIN}: {message}"
    with pytest.raises(InvalidInput) as err:
        SERVER.bound(entry(**{key: value}))
    assert str(err.value) == f"m/model.json: {message}"


def test_settings_may_lower_or_meet_every_limit():
    lower = {"queue_size": 8, "max_batch_size": 32, "max_batch_tokens": 100, "max_queue_delay_ms": 0}
    merged = SERVER.bound(entry(batching="dynamic"), ModelSettings.from_json(lower))
    assert (merged.queue_size, merged.max_batch_size, merged.max_batch_tokens, merged.max_queue_delay_ms,
            merged.batching) == (8, 32, 100, 0, "dynamic")
    # a load's config that lowers what the settings file raised makes the load fit
    assert SERVER.bound(entry(queue_size=10**6), ModelSettings(queue_size=256)).queue_size == 256
    # no ceiling where the server has none (--max-batch-tokens 0), or where none is given
    assert Ceilings(max_batch_tokens=None).bound(entry(max_batch_tokens=10**9)).max_batch_tokens == 10**9
    assert Ceilings().bound(entry(queue_size=10**9)).queue_size == 10**9


def test_the_repository_refuses_a_load_beyond_the_ceilings_and_keeps_serving(tmp_path):
    """Neither a load's config nor a model's settings file can raise a limit: the load is refused before
    anything is opened, and a model already serving keeps serving."""
    async def main():
        repo, loader = make(tmp_path, {"a": [1], "b": [1]}, ControlMode.EXPLICIT, ceilings=SERVER)
        await repo.load("a", ModelSettings(queue_size=16))
        with pytest.raises(InvalidInput, match=r"^load parameter 'config': queue_size 1000000000 exceeds "
                                               r"this server's --queue-size 256$"):
            await repo.load("a", ModelSettings.from_json({"queue_size": 1e9}))
        assert loader.loads == [("a", 1)] and repo.ready("a")
        (tmp_path / "repo" / "b" / "model.json").write_text(json.dumps({"max_queue_delay_ms": 60000}))
        with pytest.raises(InvalidInput, match=r"^b/model.json: max_queue_delay_ms 60000 exceeds this "
                                               r"server's --max-queue-delay-ms 5.0$"):
            await repo.load("b")
        assert loader.loads == [("a", 1)] and repo.index()[-1].state is ModelState.UNAVAILABLE
        await repo.load("b", ModelSettings(max_queue_delay_ms=1.0))  # the load lowers it: it fits
        assert loader.loads == [("a", 1), ("b", 1)]
    asyncio.run(main())


def test_mode_none_does_not_start_a_model_beyond_the_ceilings(tmp_path):
    async def main():
        repo, loader = make(tmp_path, {"a": [1]}, ControlMode.NONE, ceilings=SERVER)
        (tmp_path / "repo" / "a" / "model.json").write_text(json.dumps({"max_batch_size": 64}))
        with pytest.raises(InvalidInput, match="--max-batch-size 32"):
            await repo.start()
        assert loader.loads == []
    asyncio.run(main())


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a": ' * 100_000, "[" * 5000 + "]" * 5000])
def test_settings_nested_too_deeply_for_the_parser_are_invalid_input(text):
    with pytest.raises(InvalidInput, match=f"^{LOAD_ORIGIN}: "):
        ModelSettings.parse(text, LOAD_ORIGIN)


def test_settings_nested_past_any_use_are_refused_before_they_are_read():
    policy = {"latest": {"num_versions": 1}}
    assert ModelSettings.parse(json.dumps({"version_policy": policy})).policy.num_versions == 1
    deep = json.dumps({"version_policy": {"latest": {"num_versions": [[[[[[[[1]]]]]]]]}}})
    with pytest.raises(InvalidInput, match=f"^model.json: settings nest deeper than {MAX_DEPTH} levels$"):
        ModelSettings.parse(deep)


def test_a_settings_file_nested_too_deeply_is_invalid_input(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.json").write_text('{"variant": ' + "[" * 100_000)
    with pytest.raises(InvalidInput, match="^m/model.json: not readable JSON"):
        RepositoryLayout(root=tmp_path).entry("m")


def test_a_value_too_deep_to_repr_is_still_shown():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert shown(deep) == "a list nested too deeply to show"
    assert shown([1, 2]) == "[1, 2]"
