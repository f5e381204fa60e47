"""The language that picks a document's sentence rules: the request's source_language, else the one the
bundle says its model reads (bundle.json `source_language`), else English. German and English rules cut
"am 3. Oktober" differently (an ordinal in German), which shows which rules were used."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import aiohttp
import pytest

from service.server import BackgroundServer
from tests.support.server import server_config

GERMAN = "Wir kommen am 3. Oktober an. Danach gehen wir."  # German rules: 2 sentences; English rules: 3


def _segments(server: BackgroundServer, text: str) -> int:
    url = f"http://{server.http_address}/v2/models/translator/document"

    async def post() -> int:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session, \
                session.post(url, data=text.encode(), headers={"Content-Type": "text/plain"}) as answer:
            assert answer.status == 200, await answer.text()
            return int(answer.headers["X-Document-Segments"])

    return asyncio.run(post())


@pytest.fixture(scope="module")
def german_bundle(tmp_path_factory, tiny_bundle: Path) -> Path:
    """The tiny bundle, its bundle.json saying that the model reads German."""
    bundle = tmp_path_factory.mktemp("german") / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    manifest = json.loads((bundle / "bundle.json").read_text())
    (bundle / "bundle.json").write_text(json.dumps({**manifest, "source_language": "de"}))
    return bundle


@pytest.mark.parametrize("which,segments", [("german_bundle", 2), ("tiny_bundle", 3)])
def test_a_document_is_cut_by_the_rules_of_the_language_its_model_reads(request, which, segments):
    with BackgroundServer(server_config(request.getfixturevalue(which), http_port=0)) as server:
        assert _segments(server, GERMAN) == segments
