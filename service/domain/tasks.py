"""A model's task prefixes (T5's "summarize: ", "translate English to German: "), and a request's task
resolved to the ids its sources start with.

A bundle declares its tasks by name (bundle.json `generation.tasks`: name -> the prefix's ids) and may make
one the default (`generation.task`; a repository's model.json `task` overrides it). A request's `task` names
one of them, or NO_TASK for none; unset (or empty) is the model's default. A model without tasks takes no task
but NO_TASK. The ids go after the bundle's own source prefix (BART's [bos]) and before the text's pieces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from interface.generation import NO_TASK
from service.domain.errors import InvalidInput
from service.domain.text import shown

MAX_TASK_CHARS = 64  # longest task name a model setting may give; what a message quotes of a client's


@dataclass(frozen=True)
class Tasks:
    """A model's task prefixes (name -> ids) and its default task (None: sources start with no prefix)."""

    prefixes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    default: str | None = None

    @property
    def names(self) -> list[str]:
        """The task names, sorted."""
        return sorted(self.prefixes)

    def resolve(self, task: str | None) -> tuple[int, ...]:
        """The ids a source starts with for a request's task (None or "": the default); InvalidInput naming
        the model's tasks for one it lacks."""
        if task is not None and not isinstance(task, str):
            raise InvalidInput(f"task must be a task name (a string), got {type(task).__name__}")
        name = task or self.default
        if name is None or name == NO_TASK:
            return ()
        if name not in self.prefixes:
            raise InvalidInput(f"unknown task {shown(name, MAX_TASK_CHARS)}: {self.known()}")
        return tuple(self.prefixes[name])

    def with_default(self, task: str) -> Tasks:
        """These tasks with `task` the default (NO_TASK: none); InvalidInput for one they lack."""
        if task != NO_TASK and task not in self.prefixes:
            raise InvalidInput(f"unknown default task {shown(task, MAX_TASK_CHARS)}: {self.known()}")
        return Tasks(self.prefixes, None if task == NO_TASK else task)

    def known(self) -> str:
        """What a message says of the tasks a request may name."""
        tasks = f"one of {', '.join(self.names)}" if self.prefixes else "none (it declares no tasks)"
        return f"the model's tasks are {tasks}; {NO_TASK!r} for no prefix (or write the task into the text)"
