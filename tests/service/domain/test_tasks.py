"""A model's task prefixes (service/domain/tasks.py): a request's task resolved to its prefix's ids, the
default, "none", and the refusals naming the model's tasks."""

from __future__ import annotations

import pytest

from service.domain.errors import InvalidInput
from service.domain.limits import RequestLimits
from service.domain.tasks import Tasks
from service.domain.types import DecodeOptions

PREFIXES = {"summarize": (21, 4), "translation_en_to_de": (9, 8, 7)}


def test_a_task_resolves_to_its_prefix_and_none_to_no_prefix() -> None:
    tasks = Tasks(PREFIXES)
    assert tasks.resolve("summarize") == (21, 4) and tasks.resolve("translation_en_to_de") == (9, 8, 7)
    assert tasks.resolve(None) == tasks.resolve("") == tasks.resolve("none") == ()
    default = Tasks(PREFIXES, "summarize")
    assert default.resolve(None) == default.resolve("") == (21, 4)
    assert default.resolve("none") == () and default.resolve("translation_en_to_de") == (9, 8, 7)
    assert Tasks().resolve(None) == Tasks().resolve("none") == ()


@pytest.mark.parametrize(("tasks", "task", "message"), [
    (Tasks(PREFIXES), "Summarize", "unknown task 'Summarize': the model's tasks are one of summarize, "
                                   "translation_en_to_de; 'none' for no prefix"),
    (Tasks(), "summarize", "unknown task 'summarize': the model's tasks are none (it declares no tasks)"),
    (Tasks(PREFIXES), 3, "task must be a task name (a string), got int"),
    (Tasks(PREFIXES), "x" * 10_000, "unknown task 'xxxx"),
])
def test_an_unknown_task_is_refused_naming_the_models(tasks: Tasks, task, message: str) -> None:
    with pytest.raises(InvalidInput, match="^" + message.replace("(", r"\(").replace(")", r"\)")) as error:
        tasks.resolve(task)
    assert len(str(error.value)) < 300


def test_a_default_is_set_over_the_bundles_or_refused() -> None:
    assert Tasks(PREFIXES).with_default("summarize") == Tasks(PREFIXES, "summarize")
    assert Tasks(PREFIXES, "summarize").with_default("none") == Tasks(PREFIXES)
    with pytest.raises(InvalidInput, match="unknown default task 'x': the model's tasks are one of summ"):
        Tasks(PREFIXES).with_default("x")


def test_request_limits_resolve_the_task_once_and_keep_it() -> None:
    limits = RequestLimits.of(64, 8, tasks=Tasks(PREFIXES, "summarize"))
    assert limits.resolve(DecodeOptions()).task_prefix == (21, 4)
    resolved = limits.resolve(DecodeOptions(task="translation_en_to_de"))
    assert resolved.task_prefix == (9, 8, 7) and limits.resolve(resolved).task_prefix == (9, 8, 7)
    assert limits.resolve(DecodeOptions(task="none")).task_prefix == ()
    with pytest.raises(InvalidInput, match="unknown task 'x'"):
        limits.resolve(DecodeOptions(task="x"))
