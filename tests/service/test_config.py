"""The server's configuration: flags, TRANSLATOR_* environment variables and defaults."""

from __future__ import annotations

import pytest

from service.config import ServerConfig, env_name, parse_config


def test_config_flags_override_environment_which_overrides_defaults():
    """Precedence flag > TRANSLATOR_* variable > default, with values parsed like flags."""
    env = {"TRANSLATOR_HOST": "0.0.0.0", "TRANSLATOR_PORT": "9000", "TRANSLATOR_BATCHING": "dynamic",
           "TRANSLATOR_PROVIDER_OPTIONS": '{"CUDAExecutionProvider": {"device_id": 1}}'}
    config = parse_config(["--port", "9001", "--providers", "CPUExecutionProvider"], env)
    assert (config.host, config.port, config.batching, config.providers) == (
        "0.0.0.0", 9001, "dynamic", ("CPUExecutionProvider",))
    assert config.provider_options == {"CUDAExecutionProvider": {"device_id": 1}}
    defaults = parse_config([], {})
    assert (defaults.host, defaults.port, defaults.metrics_port, defaults.batching) == (
        "127.0.0.1", 8001, 8002, "continuous")
    assert defaults.bundle.parts[-3:] == ("artifacts", "default", "bundle")
    assert env_name("--max-queue-delay-ms") == "TRANSLATOR_MAX_QUEUE_DELAY_MS"
    assert defaults.max_batch_tokens == ServerConfig().max_batch_tokens > 0  # a budget by default
    budget = {"TRANSLATOR_MAX_BATCH_TOKENS": "900"}
    assert parse_config(["--max-batch-tokens", "0"], budget).max_batch_tokens == 0
    assert parse_config([], budget).max_batch_tokens == 900


@pytest.mark.parametrize(("argv", "env"), [
    (["--batching", "sometimes"], {}), ([], {"TRANSLATOR_PORT": "eighty"}), (["--tls-cert", "c.pem"], {}),
    (["--provider-options", "{not json"], {}), (["--max-batch-size", "0"], {}),
    (["--max-batch-tokens", "-1"], {}),
])
def test_config_rejects_bad_values(argv, env):
    """Bad flag or environment values are usage errors (exit code 2)."""
    with pytest.raises(SystemExit) as exc:
        parse_config(argv, env)
    assert exc.value.code == 2


def test_modelmesh_is_served_only_when_asked():
    """--modelmesh is off by default; a bare flag, a value or TRANSLATOR_MODELMESH turns it on."""
    assert not parse_config([], {}).modelmesh and not ServerConfig().modelmesh
    assert parse_config(["--modelmesh"], {}).modelmesh
    assert parse_config([], {"TRANSLATOR_MODELMESH": "true"}).modelmesh
    assert not parse_config(["--modelmesh", "false"], {"TRANSLATOR_MODELMESH": "1"}).modelmesh
    assert not parse_config([], {"TRANSLATOR_MODELMESH": "off"}).modelmesh
    with pytest.raises(SystemExit) as exc:
        parse_config(["--modelmesh", "maybe"], {})
    assert exc.value.code == 2
