"""Proto definitions: wire compatibility with tritonclient's compiled protos, and code generation."""

from __future__ import annotations

import queue
from concurrent import futures

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FileDescriptor
from tritonclient.grpc import model_config_pb2 as triton_config
from tritonclient.grpc import service_pb2 as triton_service
from tritonclient.grpc._utils import _get_inference_request

from protos import codegen
from protos.inference import POOL, grpc_service_pb2, grpc_service_pb2_grpc, model_config_pb2
from protos.translator.v1 import translator_pb2, translator_pb2_grpc
from service.api.grpc.kserve import infer_request, infer_response
from service.dataplane import kserve
from service.domain.errors import InvalidTensor
from tests.support.kserve import text_input

TRITON_POOL = triton_service.DESCRIPTOR.pool
OUR_INFERENCE_FILES = (grpc_service_pb2.DESCRIPTOR, model_config_pb2.DESCRIPTOR)


def _all_messages(container: FileDescriptor | Descriptor) -> list[Descriptor]:
    """Every message of a file or message, nested ones included (map entries too)."""
    tops = container.message_types_by_name if isinstance(container, FileDescriptor) else None
    found = []
    for message in (tops.values() if tops is not None else container.nested_types):
        found.append(message)
        found.extend(_all_messages(message))
    return found


def _all_enums(file: FileDescriptor) -> list[EnumDescriptor]:
    """Every enum of a file, nested ones included."""
    enums = list(file.enum_types_by_name.values())
    for message in _all_messages(file):
        enums.extend(message.enum_types)
    return enums


def _field_signature(field) -> tuple:
    """What the wire format and the generated APIs depend on for one field."""
    return (
        field.number,
        field.type,
        field.is_repeated,
        field.message_type.full_name if field.message_type else None,
        field.enum_type.full_name if field.enum_type else None,
        field.containing_oneof.name if field.containing_oneof else None,
        field.json_name,
    )


def compare_file(ours: FileDescriptor, reference: descriptor_pool.DescriptorPool) -> list[str]:
    """Differences between our file and the same-named definitions in `reference` (empty = compatible)."""
    problems: list[str] = []
    for message in _all_messages(ours):
        try:
            theirs = reference.FindMessageTypeByName(message.full_name)
        except KeyError:
            problems.append(f"{message.full_name}: not defined by Triton")
            continue
        if message.GetOptions().map_entry != theirs.GetOptions().map_entry:
            problems.append(f"{message.full_name}: map entry flag differs")
        for field in message.fields:
            other = theirs.fields_by_name.get(field.name)
            if other is None:
                problems.append(f"{field.full_name}: no such field in Triton")
            elif _field_signature(field) != _field_signature(other):
                problems.append(f"{field.full_name}: {_field_signature(field)} != {_field_signature(other)}")
    for enum in _all_enums(ours):
        try:
            theirs = reference.FindEnumTypeByName(enum.full_name)
        except KeyError:
            problems.append(f"{enum.full_name}: enum not defined by Triton")
            continue
        mine = {v.name: v.number for v in enum.values}
        other = {v.name: v.number for v in theirs.values}
        if any(other.get(name) != number for name, number in mine.items()):
            problems.append(f"{enum.full_name}: values {mine} not a subset of {other}")
    for service in ours.services_by_name.values():
        theirs = reference.FindServiceByName(service.full_name)
        for method in service.methods:
            other = theirs.methods_by_name.get(method.name)
            sig = (method.input_type.full_name, method.output_type.full_name,
                   method.client_streaming, method.server_streaming)
            if other is None:
                problems.append(f"{method.full_name}: no such method in Triton")
            elif sig != (other.input_type.full_name, other.output_type.full_name,
                         other.client_streaming, other.server_streaming):
                problems.append(f"{method.full_name}: signature differs")
    return problems


def test_generated_module_paths() -> None:
    """The generated modules import under the documented paths and carry the Triton package."""
    assert grpc_service_pb2.DESCRIPTOR.package == "inference"
    assert model_config_pb2.DESCRIPTOR.package == "inference"
    assert translator_pb2.DESCRIPTOR.package == "translator.v1"
    assert grpc_service_pb2.DESCRIPTOR.pool is POOL  # private pool: coexists with tritonclient
    assert translator_pb2.DESCRIPTOR.pool is descriptor_pool.Default()
    assert hasattr(grpc_service_pb2_grpc, "GRPCInferenceServiceServicer")
    assert hasattr(translator_pb2_grpc, "TranslatorServicer")


@pytest.mark.parametrize("ours", OUR_INFERENCE_FILES, ids=lambda f: f.name)
def test_inference_protos_match_tritonclient(ours: FileDescriptor) -> None:
    """Every message, field, enum and method we define matches tritonclient's compiled descriptors."""
    assert compare_file(ours, TRITON_POOL) == []


def test_expected_subset_is_defined() -> None:
    """The methods and messages the brief requires are all present."""
    service = grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert sorted(service.methods_by_name) == sorted([
        "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer",
        "ModelStreamInfer", "ModelConfig", "ModelStatistics",
        "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload",  # the repository extension
    ])
    for name in ("InferParameter", "InferTensorContents", "ModelStreamInferResponse", "ModelStatistics",
                 "InferStatistics", "InferBatchStatistics", "StatisticDuration"):
        assert name in grpc_service_pb2.DESCRIPTOR.message_types_by_name
    for name in ("ModelConfig", "ModelInput", "ModelOutput", "ModelDynamicBatching", "ModelQueuePolicy",
                 "ModelInstanceGroup", "ModelVersionPolicy", "ModelTransactionPolicy"):
        assert name in model_config_pb2.DESCRIPTOR.message_types_by_name
    assert model_config_pb2.DataType.Value("TYPE_STRING") == triton_config.DataType.Value("TYPE_STRING") == 13


def test_comparison_detects_a_renumbered_field() -> None:
    """The comparison is able to fail: a copy of our file with one field renumbered is reported."""
    proto = descriptor_pb2.FileDescriptorProto()
    model_config_pb2.DESCRIPTOR.CopyToProto(proto)
    message = next(m for m in proto.message_type if m.name == "ModelInput")
    next(f for f in message.field if f.name == "dims").number = 40
    pool = descriptor_pool.DescriptorPool()
    altered = pool.AddSerializedFile(proto.SerializeToString())
    assert compare_file(altered, TRITON_POOL) == [
        "inference.ModelInput.dims: (40, 3, True, None, None, None, 'dims') != "
        "(4, 3, True, None, None, None, 'dims')"
    ]


def _full_triton_request() -> triton_service.ModelInferRequest:
    """A ModelInferRequest built by tritonclient's own request builder, with parameters set."""
    tensor = triton_grpc.InferInput(kserve.INPUT, [2], "BYTES")
    tensor.set_data_from_numpy(np.array([b"hello", "w\u00f6rld".encode()], dtype=np.object_))
    request = _get_inference_request(
        model_name="translator", inputs=[tensor], model_version="1", request_id="req-7",
        outputs=[triton_grpc.InferRequestedOutput(kserve.OUTPUT)], sequence_id=0,
        sequence_start=False, sequence_end=False, priority=3, timeout=None,
        parameters={"beam_size": 4, "max_tokens": "12"},
    )
    request.inputs[0].parameters["p"].double_param = 0.5
    return request


def test_infer_request_round_trips_between_both_definitions() -> None:
    """Bytes written by tritonclient parse with our messages and re-serialize identically."""
    theirs = _full_triton_request()
    ours = grpc_service_pb2.ModelInferRequest.FromString(theirs.SerializeToString(deterministic=True))
    assert ours.model_name == "translator" and ours.id == "req-7"
    assert list(ours.inputs[0].shape) == [2] and ours.inputs[0].datatype == "BYTES"
    assert ours.parameters["beam_size"].int64_param == 4
    assert ours.inputs[0].parameters["p"].double_param == 0.5
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)


def test_model_config_and_statistics_round_trip() -> None:
    """Our ModelConfig / statistics answers decode with tritonclient's classes field for field."""
    config = model_config_pb2.ModelConfig(
        name="translator", platform="onnxruntime_onnx", backend="onnxruntime", max_batch_size=0,
        input=[model_config_pb2.ModelInput(name="TEXT", data_type=model_config_pb2.TYPE_STRING, dims=[-1])],
        output=[model_config_pb2.ModelOutput(name="TRANSLATION", data_type=model_config_pb2.TYPE_STRING,
                                             dims=[-1])],
        dynamic_batching=model_config_pb2.ModelDynamicBatching(
            max_queue_delay_microseconds=2000, preferred_batch_size=[16],
            default_queue_policy=model_config_pb2.ModelQueuePolicy(max_queue_size=256),
        ),
        version_policy=model_config_pb2.ModelVersionPolicy(
            latest=model_config_pb2.ModelVersionPolicy.Latest(num_versions=1)),
        model_transaction_policy=model_config_pb2.ModelTransactionPolicy(decoupled=True),
        instance_group=[
            model_config_pb2.ModelInstanceGroup(count=1, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
        ],
    )
    config.parameters["max_beam_size"].string_value = "8"
    decoded = triton_service.ModelConfigResponse.FromString(
        grpc_service_pb2.ModelConfigResponse(config=config).SerializeToString()
    ).config
    assert decoded.input[0].data_type == triton_config.TYPE_STRING and list(decoded.input[0].dims) == [-1]
    assert decoded.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert decoded.dynamic_batching.max_queue_delay_microseconds == 2000
    assert list(decoded.dynamic_batching.preferred_batch_size) == [16]
    assert decoded.dynamic_batching.default_queue_policy.max_queue_size == 256
    assert decoded.version_policy.latest.num_versions == 1
    assert decoded.model_transaction_policy.decoupled
    assert decoded.instance_group[0].kind == triton_config.ModelInstanceGroup.KIND_CPU
    assert decoded.parameters["max_beam_size"].string_value == "8"
    queue_time = grpc_service_pb2.StatisticDuration(count=5, ns=9)
    stats = grpc_service_pb2.ModelStatisticsResponse(model_stats=[grpc_service_pb2.ModelStatistics(
        name="translator", version="1", last_inference=1_700_000_000_123, inference_count=5,
        execution_count=2,
        inference_stats=grpc_service_pb2.InferStatistics(
            success=grpc_service_pb2.StatisticDuration(count=2, ns=70), queue=queue_time,
            compute_infer=grpc_service_pb2.StatisticDuration(count=2, ns=40),
            fail=grpc_service_pb2.StatisticDuration(count=1, ns=3)),
        batch_stats=[grpc_service_pb2.InferBatchStatistics(
            batch_size=3, compute_infer=grpc_service_pb2.StatisticDuration(count=1, ns=11))],
    )])
    wire = stats.SerializeToString()
    decoded_stats = triton_service.ModelStatisticsResponse.FromString(wire).model_stats[0]
    assert (decoded_stats.inference_count, decoded_stats.inference_stats.queue.ns) == (5, 9)
    batch = decoded_stats.batch_stats[0]
    assert (batch.batch_size, batch.compute_infer.count, batch.compute_infer.ns) == (3, 1, 11)
    infer = decoded_stats.inference_stats
    assert (infer.success.count, infer.success.ns, infer.compute_infer.ns, infer.fail.count) == (2, 70, 40, 1)
    assert (decoded_stats.version, decoded_stats.last_inference) == ("1", 1_700_000_000_123)


class _UpperCaseServicer(grpc_service_pb2_grpc.GRPCInferenceServiceServicer):
    """A stand-in model that upper-cases its input, served through our generated service."""

    def ServerLive(self, request, context):  # noqa: N802 - gRPC method name
        """Always live."""
        return grpc_service_pb2.ServerLiveResponse(live=True)

    def _infer(self, request) -> grpc_service_pb2.ModelInferResponse:
        """Decode, upper-case, encode."""
        plain = infer_request(request)
        texts = kserve.translation_texts(plain)
        return infer_response(kserve.InferResponse(plain.model, plain.version, plain.id,
                                                   [kserve.translation_output([t.upper() for t in texts])]))

    def ModelInfer(self, request, context):  # noqa: N802 - gRPC method name
        """Unary inference."""
        try:
            return self._infer(request)
        except InvalidTensor as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    def ModelStreamInfer(self, request_iterator, context):  # noqa: N802 - gRPC method name
        """Streaming inference: errors travel as messages."""
        for request in request_iterator:
            try:
                yield grpc_service_pb2.ModelStreamInferResponse(infer_response=self._infer(request))
            except InvalidTensor as exc:
                yield grpc_service_pb2.ModelStreamInferResponse(error_message=str(exc))


@pytest.fixture()
def kserve_server():
    """An in-process server on 127.0.0.1 with a free port, serving _UpperCaseServicer."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(_UpperCaseServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


def test_tritonclient_talks_to_our_service(kserve_server: str) -> None:
    """tritonclient.grpc, unchanged, calls our generated service: unary, errors and streaming."""
    client = triton_grpc.InferenceServerClient(url=kserve_server)
    try:
        assert client.is_server_live()
        result = client.infer("translator", [text_input(["abc", "gr\u00fc\u00df"])], request_id="r1")
        assert result.as_numpy("TRANSLATION").tolist() == [b"ABC", "GR\u00dcSS".encode()]
        assert result.get_response().id == "r1"
        bad = triton_grpc.InferInput("TEXT", [1], "INT64")
        bad.set_data_from_numpy(np.array([1], dtype=np.int64))
        with pytest.raises(triton_grpc.InferenceServerException, match="expected BYTES"):
            client.infer("translator", [bad])
        with pytest.raises(triton_grpc.InferenceServerException, match="Unimplemented|UNIMPLEMENTED"):
            client.get_model_repository_index()

        results: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer("translator", [text_input(["x"])])
        client.async_stream_infer("translator", [bad])
        first, second = results.get(timeout=30), results.get(timeout=30)
        client.stop_stream()
        assert first[1] is None and first[0].as_numpy("TRANSLATION").tolist() == [b"X"]
        assert second[0] is None and "expected BYTES" in str(second[1])
    finally:
        client.close()


def test_translator_service_shape() -> None:
    """translator.v1 methods, streaming flags and option presence are as documented."""
    service = translator_pb2.DESCRIPTOR.services_by_name["Translator"]
    flags = {m.name: (m.client_streaming, m.server_streaming) for m in service.methods}
    assert flags == {
        "Translate": (False, False), "TranslateStream": (False, True), "GetModelInfo": (False, False),
        "Score": (False, False), "TranslateDocument": (False, False),
        "TranslateDocumentStream": (False, True), "Detect": (False, False),
    }
    options = translator_pb2.TranslateOptions()
    assert not options.HasField("length_penalty")
    options.length_penalty = 0.0
    assert options.HasField("length_penalty")  # 0 is a real value, distinct from "unset"
    hypothesis = translator_pb2.Hypothesis(
        text="hi", token_ids=[5, 6], finish_reason=translator_pb2.FINISH_REASON_EOS,
        alignment=[translator_pb2.AlignmentRow(weights=[0.25, 0.75])] * 3,
    )
    decoded = translator_pb2.Hypothesis.FromString(hypothesis.SerializeToString())
    assert [list(row.weights) for row in decoded.alignment] == [[0.25, 0.75]] * 3
    assert translator_pb2.FinishReason.Name(decoded.finish_reason) == "FINISH_REASON_EOS"
    stream = translator_pb2.TranslateStreamResponse(piece=translator_pb2.TokenPiece(index=0, text="h"))
    assert stream.WhichOneof("event") == "piece"
    part = translator_pb2.DocumentPart(text="a", done=1)
    assert translator_pb2.TranslateDocumentStreamResponse(part=part).WhichOneof("event") == "part"
    assert translator_pb2.DocumentFormat.Name(0) == "DOCUMENT_FORMAT_UNSPECIFIED"  # refused: no default


def test_codegen_is_idempotent_and_outputs_are_complete() -> None:
    """Generation is skipped when up to date and every expected module exists."""
    assert codegen.generate(force=False) is False
    produced = {
        out.relative_to(codegen.ROOT).as_posix() for p in codegen.proto_files() for out in codegen.outputs(p)
    }
    assert produced == {
        "protos/inference/grpc_service_pb2.py", "protos/inference/grpc_service_pb2.pyi",
        "protos/inference/grpc_service_pb2_grpc.py", "protos/inference/model_config_pb2.py",
        "protos/inference/model_config_pb2.pyi", "protos/modelmesh/model_runtime_pb2.py",
        "protos/modelmesh/model_runtime_pb2.pyi", "protos/modelmesh/model_runtime_pb2_grpc.py",
        "protos/translator/v1/translator_pb2.py",
        "protos/translator/v1/translator_pb2.pyi", "protos/translator/v1/translator_pb2_grpc.py",
    }


def test_codegen_rejects_unloadable_gencode() -> None:
    """Gencode newer than (or of another major than) the runtime is reported with a clear message."""
    with pytest.raises(RuntimeError, match="grpcio-tools emitted protobuf 99.0.0 code"):
        codegen._check_gencode("# Protobuf Python Version: 99.0.0\n", "x_pb2.py")
    codegen._check_gencode("# Protobuf Python Version: 6.0.0\n", "x_pb2.py")


def test_private_pool_rewrite_requires_the_expected_shape() -> None:
    """The pool rewrite changes exactly one line and refuses code it does not recognize."""
    source = (
        "# @@protoc_insertion_point(imports)\n"
        "DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile(b'')\n"
    )
    rewritten = codegen._use_private_pool(source, "protos.inference", "x_pb2.py")
    assert "from protos.inference import POOL as _PRIVATE_POOL" in rewritten
    assert "_PRIVATE_POOL.AddSerializedFile(b'')" in rewritten and "Default()" not in rewritten
    with pytest.raises(RuntimeError, match="expected one default-pool registration"):
        codegen._use_private_pool("DESCRIPTOR = None\n", "protos.inference", "x_pb2.py")
