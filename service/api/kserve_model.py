"""What the KServe v2 / Triton protocol says about a served model: its tensors' metadata, its Triton model
configuration (with the server's real batching settings) and its statistics messages."""

from __future__ import annotations

from protos.inference import grpc_service_pb2 as pb
from protos.inference import model_config_pb2 as config_pb
from service.api import kserve_codec, kserve_parameters
from service.domain.types import BatchingMode
from service.models.served import ServedModel
from service.ops import statistics

PLATFORM = "onnxruntime_onnx"


def tensor(name: str) -> pb.ModelMetadataResponse.TensorMetadata:
    """Metadata of a 1-D BYTES tensor of any length."""
    metadata = pb.ModelMetadataResponse.TensorMetadata
    return metadata(name=name, datatype=kserve_codec.BYTES_DATATYPE, shape=[-1])


def model_config(model: ServedModel) -> config_pb.ModelConfig:
    """The Triton model configuration of a served model, with its real batching settings.

    max_batch_size is 0, Triton's "the model batches by itself": a request's TEXT shape [N] is
    its full shape (no implicit batch dimension), so Triton tools send shape [N] tensors. The
    server's own batching is described by `dynamic_batching` (absent in mode none; max queue
    delay 0 in continuous mode, where texts join before any decoder step), its bounded queue by
    `default_queue_policy.max_queue_size` (in texts), and everything else in `parameters`.
    """
    runner, scheduler = model.runner, model.scheduler
    text = config_pb.TYPE_STRING
    gpu = runner.provider.startswith("CUDA")
    config = config_pb.ModelConfig(
        name=model.name, platform=PLATFORM, backend="onnxruntime", max_batch_size=0,
        version_policy=config_pb.ModelVersionPolicy(latest=config_pb.ModelVersionPolicy.Latest(num_versions=1)),
        input=[config_pb.ModelInput(name=kserve_codec.INPUT_NAME, data_type=text, dims=[-1])],
        output=[config_pb.ModelOutput(name=kserve_codec.OUTPUT_NAME, data_type=text, dims=[-1])],
        instance_group=[config_pb.ModelInstanceGroup(
            name=model.name, count=1,
            kind=config_pb.ModelInstanceGroup.KIND_GPU if gpu else config_pb.ModelInstanceGroup.KIND_CPU)],
        model_transaction_policy=config_pb.ModelTransactionPolicy(decoupled=False),
    )
    settings = scheduler.settings
    if scheduler.mode != BatchingMode.NONE:
        batching = config.dynamic_batching
        if scheduler.mode == BatchingMode.DYNAMIC:
            batching.preferred_batch_size.append(settings.max_batch_size)
            batching.max_queue_delay_microseconds = round(settings.max_queue_delay_ms * 1000)
        batching.default_queue_policy.max_queue_size = settings.queue_size
    parameters = {
        "batching_mode": scheduler.mode.value, "max_batch_size": settings.max_batch_size,
        "max_texts_per_request": settings.max_batch_size, "max_batch_tokens": settings.max_batch_tokens,
        "max_queue_delay_ms": settings.max_queue_delay_ms,
        "queue_size": settings.queue_size, "max_beam_size": scheduler.limits.max_beam,
        "max_output_tokens": scheduler.limits.max_output_tokens,
        "max_source_tokens": scheduler.limits.max_source_tokens,
        "execution_provider": runner.provider, "variant": runner.variant_name,
        "stream_parameter": kserve_parameters.STREAM_KEY,
    }
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)
    return config


def _duration(value: statistics.Duration) -> pb.StatisticDuration:
    """A StatisticDuration message."""
    return pb.StatisticDuration(count=value.count, ns=value.ns)


def model_statistics(snapshot: statistics.Snapshot, name: str, version: str) -> pb.ModelStatistics:
    """The ModelStatistics message of a model (definitions in service/ops/statistics.py)."""
    return pb.ModelStatistics(
        name=name, version=version, last_inference=snapshot.last_inference_ms,
        inference_count=snapshot.inference_count, execution_count=snapshot.execution_count,
        inference_stats=pb.InferStatistics(
            success=_duration(snapshot.success), fail=_duration(snapshot.fail),
            queue=_duration(snapshot.queue),
            compute_input=_duration(snapshot.compute_input), compute_infer=_duration(snapshot.compute_infer),
            compute_output=_duration(snapshot.compute_output),
        ),
        batch_stats=[pb.InferBatchStatistics(batch_size=size, compute_infer=_duration(runs))
                     for size, runs in sorted(snapshot.batches.items())],
    )
