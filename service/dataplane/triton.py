"""What the KServe v2 / Triton protocol says about a served model, as the plain JSON documents its REST form
defines (every field written, as Triton's REST answers): the model metadata, the Triton model configuration
with the server's real batching settings, and the model statistics. The gRPC form parses the same documents
into its messages."""

from __future__ import annotations

from typing import Any

from interface.names import MODEL_NAME
from service.dataplane import kserve, parameters
from service.domain.types import BatchingMode
from service.models.served import ServedModel
from service.ops import statistics

PLATFORM = "onnxruntime_onnx"
SERVER_NAME = MODEL_NAME  # the server names itself as its default model
EXTENSIONS = ["parameters", "model_configuration", "statistics", "model_repository"]


def metadata(model: ServedModel, name: str, versions: list[int]) -> dict[str, Any]:
    """The model metadata: its name as requested, loaded versions, platform and 1-D BYTES tensors."""
    def tensor(tensor_name: str) -> dict[str, Any]:
        return {"name": tensor_name, "datatype": kserve.BYTES, "shape": [-1]}

    return {"name": name or model.name, "versions": [str(v) for v in versions], "platform": PLATFORM,
            "inputs": [tensor(kserve.INPUT)], "outputs": [tensor(kserve.OUTPUT)]}


def model_config(model: ServedModel) -> dict[str, Any]:
    """The Triton model configuration of a served model, with its real batching settings.

    max_batch_size is 0, Triton's "the model batches by itself": a request's TEXT shape [N] is its full
    shape (no implicit batch dimension), so Triton tools send shape [N] tensors. The server's own batching
    is described by `dynamic_batching` (absent in mode none; max queue delay 0 in continuous mode, where
    texts join before any decoder step), its bounded queue by `default_queue_policy.max_queue_size` (in
    texts), and everything else in `parameters`.
    """
    runner, scheduler, settings = model.runner, model.scheduler, model.scheduler.settings
    kind = "KIND_GPU" if runner.provider.startswith("CUDA") else "KIND_CPU"
    config: dict[str, Any] = {
        "name": model.name, "platform": PLATFORM, "version_policy": {"latest": {"num_versions": 1}},
        "max_batch_size": 0,
        "input": [{"name": kserve.INPUT, "data_type": "TYPE_STRING", "format": "FORMAT_NONE", "dims": [-1],
                   "is_shape_tensor": False, "allow_ragged_batch": False, "optional": False,
                   "is_non_linear_format_io": False}],
        "output": [{"name": kserve.OUTPUT, "data_type": "TYPE_STRING", "dims": [-1], "label_filename": "",
                    "is_shape_tensor": False, "is_non_linear_format_io": False}],
        "instance_group": [{"name": model.name, "count": 1, "gpus": [], "kind": kind, "profile": [],
                            "passive": False, "host_policy": ""}],
        "default_model_filename": "",
    }
    if scheduler.mode != BatchingMode.NONE:
        dynamic = scheduler.mode == BatchingMode.DYNAMIC
        config["dynamic_batching"] = {
            "preferred_batch_size": [settings.max_batch_size] if dynamic else [],
            "max_queue_delay_microseconds": round(settings.max_queue_delay_ms * 1000) if dynamic else 0,
            "preserve_ordering": False, "priority_levels": 0, "default_priority_level": 0,
            "default_queue_policy": {"timeout_action": "REJECT", "default_timeout_microseconds": 0,
                                     "allow_timeout_override": False, "max_queue_size": settings.queue_size},
            "priority_queue_policy": {}}
    values = {
        "batching_mode": scheduler.mode.value, "max_batch_size": settings.max_batch_size,
        "max_texts_per_request": settings.max_batch_size, "max_batch_tokens": settings.max_batch_tokens,
        "max_queue_delay_ms": settings.max_queue_delay_ms,
        "queue_size": settings.queue_size, "max_beam_size": scheduler.limits.max_beam,
        "max_output_tokens": scheduler.limits.max_output_tokens,
        "max_source_tokens": scheduler.limits.max_source_tokens,
        "execution_provider": runner.provider, "variant": runner.variant_name,
        "stream_parameter": parameters.STREAM, "glossary_terms": len(scheduler.limits.glossary),
        "tasks": ",".join(scheduler.limits.tasks.names), "default_task": scheduler.limits.tasks.default or "",
    }
    config["parameters"] = {key: {"string_value": str(value)} for key, value in values.items()}
    config |= {"backend": "onnxruntime", "model_transaction_policy": {"decoupled": False}, "runtime": ""}
    return config


def _duration(value: statistics.Duration) -> dict[str, int]:
    """A StatisticDuration."""
    return {"count": value.count, "ns": value.ns}


def model_statistics(model: ServedModel) -> dict[str, Any]:
    """The statistics of one loaded model version (definitions in service/ops/statistics.py)."""
    snapshot = model.scheduler.recorder.stats.snapshot()
    none = statistics.Duration(0, 0)
    stats = {name: _duration(getattr(snapshot, name)) for name in
             ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit",
              "cache_miss")}
    return {
        "name": model.name, "version": str(model.version), "last_inference": snapshot.last_inference_ms,
        "inference_count": snapshot.inference_count, "execution_count": snapshot.execution_count,
        "inference_stats": stats,
        "batch_stats": [{"batch_size": size, "compute_input": _duration(none),
                         "compute_infer": _duration(runs), "compute_output": _duration(none)}
                        for size, runs in sorted(snapshot.batches.items())],
    }
