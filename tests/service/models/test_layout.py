"""The repository on disk (service/models/layout.py, naming.py): Triton's layout, version policies as
Triton states them, the settings file's checks and the names that may reach the file system."""

from __future__ import annotations

import json
import re

import pytest

from service.domain.errors import InvalidInput, UnknownModel
from service.models.layout import ModelSettings, RepositoryLayout, VersionPolicy
from service.models.naming import check_name, check_version, inside


@pytest.mark.parametrize(("policy", "expected"), [
    ({"latest": {"num_versions": 1}}, [7]),
    ({"latest": {"num_versions": 2}}, [3, 7]),
    ({"latest": {}}, [7]),
    ({"all": {}}, [1, 3, 7]),
    ({"specific": {"versions": [3, 1, 9]}}, [1, 3]),  # a version not on disk is not served
])
def test_version_policies_select_as_triton_says(policy, expected):
    assert VersionPolicy.from_json(policy).select([7, 1, 3]) == expected


@pytest.mark.parametrize("policy", [{}, {"latest": {"num_versions": 0}}, {"specific": {"versions": []}},
                                    {"newest": {}}, {"latest": {}, "all": {}}, "all",
                                    {"specific": {"versions": ["1"]}}, {"latest": {"num_versions": True}}])
def test_bad_version_policies_are_refused(policy):
    with pytest.raises(InvalidInput, match="version_policy"):
        VersionPolicy.from_json(policy)


def test_version_folders_are_plain_positive_numbers(tmp_path):
    """Only the digits naming.VERSION accepts, written once: "01" would collide with "1", "²" is no ASCII
    digit, "0" is no version."""
    for folder in ("1", "01", "\u00b2", "0", "12"):
        (tmp_path / "m" / folder).mkdir(parents=True)
        (tmp_path / "m" / folder / "bundle.json").write_text("{}")
    entry = RepositoryLayout(root=tmp_path).entry("m")
    assert {v: p.name for v, p in entry.versions.items()} == {1: "1", 12: "12"}


def test_no_model_takes_a_name_a_route_takes(tmp_path):
    """GET /v2/models/stats is every model's statistics: a folder named stats is no model, and the name is
    refused with the reason."""
    for name in ("stats", "m"):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "1" / "bundle.json").write_text("{}")
    layout = RepositoryLayout(root=tmp_path)
    assert layout.names() == ["m"]
    with pytest.raises(InvalidInput, match="invalid model name 'stats': a KServe v2 route takes it"):
        layout.entry("stats")


def test_settings_file_and_load_config_override(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "bundle.json").write_text("{}")
    (tmp_path / "m" / "2").mkdir()  # no bundle.json: not a version
    (tmp_path / "m" / "notes").mkdir()  # not a number: ignored
    (tmp_path / "m" / "model.json").write_text(json.dumps(
        {"batching": "dynamic", "max_batch_size": 8, "version_policy": {"all": {}}}))
    entry = RepositoryLayout(root=tmp_path).entry("m")
    assert sorted(entry.versions) == [1] and entry.served() == [1]
    assert (entry.settings.batching, entry.settings.max_batch_size) == ("dynamic", 8)
    override = ModelSettings.from_json({"max_batch_size": 4, "variant": "int8"}).over(entry.settings)
    assert (override.batching, override.max_batch_size, override.variant) == ("dynamic", 4, "int8")
    assert override.version_policy.kind == "all"  # kept from the file: the override did not set one


@pytest.mark.parametrize(("settings", "message"), [
    ({"max_batch_sise": 4}, "unknown settings"),
    ({"batching": "fast"}, "batching must be one of"),
    ({"max_batch_size": 0}, "max_batch_size must be a whole number >= 1, got 0"),
    ({"queue_size": "8"}, "queue_size must be a whole number >= 1, got '8'"),
    ({"max_batch_size": float("inf")}, "max_batch_size must be a whole number >= 1, got inf"),
    ({"max_batch_tokens": 2.5}, "max_batch_tokens must be a whole number >= 1, got 2.5"),
    ({"queue_size": True}, "queue_size must be a whole number >= 1"),
    ({"max_queue_delay_ms": float("nan")}, "max_queue_delay_ms must be a finite number >= 0, got nan"),
    ({"max_queue_delay_ms": -1}, "max_queue_delay_ms must be a finite number >= 0, got -1"),
    ({"variant": "../int8"}, "variant must be a variant name"),
    ([1, 2], "must be a JSON object"),
])
def test_bad_settings_are_refused_with_the_reason(settings, message):
    with pytest.raises(InvalidInput, match=re.escape(message)):
        ModelSettings.from_json(settings)


def test_settings_as_json_text_with_non_finite_numbers_are_refused(tmp_path):
    for text in ('{"max_batch_size": 1e400}', '{"max_batch_size": Infinity}', '{"max_queue_delay_ms": NaN}'):
        (tmp_path / "m" / "1").mkdir(parents=True, exist_ok=True)
        (tmp_path / "m" / "model.json").write_text(text)
        with pytest.raises(InvalidInput, match="must be a"):
            RepositoryLayout(root=tmp_path).entry("m")
    assert ModelSettings.from_json({"max_batch_size": 8.0, "max_queue_delay_ms": 0}).max_batch_size == 8


def test_an_unreadable_settings_file_is_refused(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.json").write_text("{not json")
    with pytest.raises(InvalidInput, match="m/model.json: not readable JSON"):
        RepositoryLayout(root=tmp_path).entry("m")


@pytest.mark.parametrize("name", ["..", ".", "../x", "a/b", "/abs", "a\\b", "", "x" * 129, "a..b", ".hidden",
                                  "a\nb", "é"])
def test_invalid_names_are_refused(name):
    with pytest.raises(InvalidInput, match="invalid model name"):
        check_name(name)


@pytest.mark.parametrize("name", ["opus-mt-en-de", "m2m100_418M", "v1.2", "_x", "A"])
def test_valid_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize("version", ["0", "-1", "1.0", "../1", "", "01x", "1" * 19])
def test_invalid_versions_are_refused(version):
    with pytest.raises(InvalidInput, match="versions are positive integers"):
        check_version(version)


def test_inside_follows_links_and_refuses_what_leaves(tmp_path):
    (tmp_path / "repo" / "a").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (tmp_path / "repo" / "link").symlink_to(tmp_path / "secret")
    assert inside(tmp_path / "repo", "a") == (tmp_path / "repo" / "a").resolve()
    with pytest.raises(InvalidInput, match="outside the model repository"):
        inside(tmp_path / "repo", "link")
    with pytest.raises(InvalidInput, match="outside the model repository"):
        inside(tmp_path / "repo", "..", "secret")


def test_a_bundle_is_a_repository_of_one(tmp_path):
    layout = RepositoryLayout(bundle=tmp_path, bundle_name="translator")
    assert layout.names() == ["translator"]
    assert layout.entry("translator").versions == {1: tmp_path}
    with pytest.raises(UnknownModel, match="unknown model 'other'"):
        layout.entry("other")


def _model_with_glossary(tmp_path, content: bytes):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "bundle.json").write_text("{}")
    (tmp_path / "m" / "glossary.tsv").write_bytes(content)
    return RepositoryLayout(root=tmp_path)


def test_a_glossary_file_is_read_with_the_models_entry(tmp_path):
    layout = _model_with_glossary(tmp_path, "\ufeff# terms\n\nbank\tBank\nbank\tUfer\nNew York\tNueva York\n"
                                            .encode())
    glossary = layout.entry("m").settings.glossary
    assert glossary is not None and len(glossary) == 2
    assert glossary.required("a bank in new york") == [("Bank", "Ufer"), ("Nueva York",)]
    assert RepositoryLayout(root=tmp_path).entry("m").settings == layout.entry("m").settings  # read twice


@pytest.mark.parametrize(("content", "message"), [
    (b"bank\tBank\nriver\tFluss\textra\n", "m/glossary.tsv, line 2: 2 tabs"),
    (b"bank\tBank\nriver\n", "m/glossary.tsv, line 2: 0 tabs"),
    (b"# c\nbank\t\n", "m/glossary.tsv, line 2 (target): empty term"),
    (b"ba\x07nk\tBank\n", "m/glossary.tsv, line 1 (source): control character U+0007"),
    (b"bank\t\xff\xfe\n", "m/glossary.tsv: not readable UTF-8"),
])
def test_a_bad_glossary_file_is_refused_naming_its_line(tmp_path, content, message):
    with pytest.raises(InvalidInput, match=re.escape(message)):
        _model_with_glossary(tmp_path, content).entry("m")


def test_a_settings_file_cannot_set_a_glossary(tmp_path):
    with pytest.raises(InvalidInput, match="unknown settings \\['glossary'\\]"):
        ModelSettings.parse(json.dumps({"glossary": {"a": "b"}}))
