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
    (["--max-batch-tokens", "-1"], {}), (["--steps-per-call", "0"], {}),
    ([], {"TRANSLATOR_MULTISTEP_ROWS": "-2"}),
])
def test_config_rejects_bad_values(argv, env):
    """Bad flag or environment values are usage errors (exit code 2)."""
    with pytest.raises(SystemExit) as exc:
        parse_config(argv, env)
    assert exc.value.code == 2


def test_steps_per_call_reaches_the_runner(tiny_bundle):
    """--steps-per-call and --multistep-rows (or their variables) become the runner's step policy; the
    default is one step per run."""
    from service.assembly import build_runner
    from service.runtime.stepping import SINGLE_STEP, StepPolicy

    assert parse_config([], {}).steps_per_call == 1
    config = parse_config(["--bundle", str(tiny_bundle), "--steps-per-call", "8",
                           "--providers", "CPUExecutionProvider"], {"TRANSLATOR_MULTISTEP_ROWS": "2"})
    runner = build_runner(config)
    assert runner.step_policy == StepPolicy(8, 2) and runner.backend.multistep
    cpu = ["--providers", "CPUExecutionProvider"]
    default = build_runner(parse_config(["--bundle", str(tiny_bundle), *cpu], {}))
    assert default.step_policy == SINGLE_STEP and not default.backend.multistep
