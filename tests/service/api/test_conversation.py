"""Every protocol and method answers as recorded (tests/service/api/conversation.json): the wire
answers and errors of one conversation with a server of the default bundle, normalised only for ids
the server draws and timings (tests/support/conversation.py; floats within its tolerance).

A change that alters an answer on purpose re-records the file (`python -m tests.support.conversation
tests/service/api/conversation.json`), and its diff shows what clients now see."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.server import BackgroundServer
from tests.support import answers as wire
from tests.support import conversation


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> Iterator[list[dict[str, Any]]]:
    """The conversation played against a fresh server of the recording's configuration."""
    config = conversation.server_config(tmp_path_factory.mktemp("conversation"))
    with BackgroundServer(config) as server:
        yield conversation.converse(server.address, server.http_address)


RECORDED = json.loads(Path(conversation.RECORD).read_text(encoding="utf-8"))


def test_the_same_exchanges_are_played(answers: list[dict[str, Any]]) -> None:
    """The conversation played is the one recorded (no exchange added, lost or reordered)."""
    assert [a["name"] for a in answers] == [r["name"] for r in RECORDED]


@pytest.mark.parametrize("index", range(len(RECORDED)), ids=[r["name"] for r in RECORDED])
def test_answer_as_recorded(answers: list[dict[str, Any]], index: int) -> None:
    """One exchange's answer equals the recorded one."""
    recorded, got = RECORDED[index], answers[index]
    assert got["name"] == recorded["name"]
    assert wire.differences(recorded["answer"], got["answer"]) == []


def test_the_comparison_sees_a_change() -> None:
    """The comparison flags a changed text, a float beyond the tolerance and a missing field."""
    record = {"text": "a", "score": -1.0, "list": [1, 2], "extra": True}
    assert wire.differences(record, record | {"score": -1.0 - 1e-4}) == []
    assert len(wire.differences(record, record | {"text": "b"})) == 1
    assert len(wire.differences(record, record | {"score": -1.1})) == 1
    assert len(wire.differences(record, {k: v for k, v in record.items() if k != "extra"})) == 1
    assert len(wire.differences(record, record | {"list": [1, 2, 3]})) == 1
