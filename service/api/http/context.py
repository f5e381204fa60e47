"""What every HTTP adapter reads of a request: the data plane, and the model and version of its path."""

from __future__ import annotations

from aiohttp import web

from service.dataplane.calls import DataPlane

PLANE_KEY = web.AppKey("data_plane", DataPlane)


def plane_of(request: web.Request) -> DataPlane:
    """The application's data plane."""
    return request.app[PLANE_KEY]


def model_of(request: web.Request) -> tuple[str, str]:
    """(model name, version or "") of the path."""
    return request.match_info["model"], request.match_info.get("version", "")
