"""Command-line client: `python -m service.client "Send 4,217 apples."` prints the translation.

Uses the native translator.v1 API by default, or the KServe v2 API with --v2 (through our generated stubs;
what any Triton client sends); --file translates a whole document (TranslateDocumentStream, a progress bar
on stderr). Exit code 0 on success, 1 on an RPC error (its status code and message are printed to stderr),
2 on bad flags.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import grpc
from google.protobuf import json_format

from interface.names import MODEL_NAME
from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.api import tls
from service.dataplane import kserve


def build_parser() -> argparse.ArgumentParser:
    """Flags of the client."""
    parser = argparse.ArgumentParser(prog="python -m service.client", description=__doc__.splitlines()[0])
    parser.add_argument("texts", nargs="*", help="texts to translate (one result line each)")
    parser.add_argument("--address", default=os.environ.get("TRANSLATOR_ADDRESS", "localhost:8001"),
                        help="server host:port [TRANSLATOR_ADDRESS; default: %(default)s]")
    parser.add_argument("--timeout", type=float, default=30.0, help="deadline in seconds (default: 30)")
    tls.add_client_flags(parser)
    parser.add_argument("--stream", action="store_true", help="print pieces as they are generated (one text)")
    parser.add_argument("--alignment", action="store_true", help="print the cross-attention alignment")
    parser.add_argument("--score", action="append", default=[], metavar="TARGET",
                        help="score TARGET given the text at its position instead of translating (one "
                             "--score per text; translator.v1 Score): prints score (mean), log_prob (sum), "
                             "token:log-prob of every scored token, and end_token_scored=true|false (eos "
                             "appended and scored, or not: a target as long as a translation cut at the "
                             "model's maximum length)")
    parser.add_argument("--scores", action="store_true", help="print score and log-probability")
    parser.add_argument("--n-best", type=int, default=0, help="hypotheses per text (needs --beam >= N)")
    parser.add_argument("--beam", type=int, default=0, help="beam size (default: the server's, greedy)")
    parser.add_argument("--max-tokens", type=int, default=0, help="most output tokens per text")
    parser.add_argument("--source-language", default="",
                        help="language code of the texts (many-to-many models; see --info)")
    parser.add_argument("--target-language", default="",
                        help="language code to translate into (many-to-many models; see --info)")
    parser.add_argument("--task", default="", help="a task of the model's (T5: summarize; see --info) whose "
                        "prefix starts every text; 'none' for no prefix")
    decoding = parser.add_argument_group("controlled decoding (docs/api.md; unset: the model's default)")
    decoding.add_argument("--length-penalty", type=float, help="length penalty alpha of beam ranking")
    decoding.add_argument("--prefix", help="target prefix: every translation starts with this text")
    decoding.add_argument("--prefix-ids", type=_ids, help="target prefix as token ids (comma-separated)")
    decoding.add_argument("--alternatives", action="store_true",
                          help="--n-best alternatives at the first position after the prefix, each "
                               "continued greedily")
    decoding.add_argument("--min-tokens", type=_count, help="eos not before this many output tokens")
    decoding.add_argument("--max-length-ratio", type=float,
                          help="at most ceil(ratio x source tokens) output tokens")
    decoding.add_argument("--repetition-penalty", type=float, help="> 1 discourages repeated tokens")
    decoding.add_argument("--no-repeat-ngram", type=_count, help="no n-gram of this size twice (0: off)")
    decoding.add_argument("--suppress", action="append", default=[], metavar="TEXT",
                          help="never produce this text (repeatable)")
    decoding.add_argument("--suppress-ids", action="append", default=[], type=_ids, metavar="IDS",
                          help="never produce this token-id sequence, comma-separated (repeatable)")
    decoding.add_argument("--disable-unk", action="store_true", help="never produce the unknown token")
    decoding.add_argument("--temperature", type=float, help="sample at this temperature (0: greedy)")
    decoding.add_argument("--top-k", type=_count, help="sample among the k most likely tokens")
    decoding.add_argument("--top-p", type=float,
                          help="sample among the most likely tokens of this much probability")
    decoding.add_argument("--seed", type=_count, help="seed of sampling: the same output for the same seed")
    document = parser.add_argument_group("documents (docs/documents.md)")
    document.add_argument("--file", type=Path, metavar="PATH",
                          help="translate this UTF-8 file as one document (TranslateDocumentStream; a "
                               "progress bar on stderr) and write it to stdout or --output")
    document.add_argument("--format", choices=tuple(FORMATS),
                          help="how to read --file (default: by its extension: .html/.htm html, "
                               ".md/.markdown markdown, else text)")
    document.add_argument("--output", type=Path, metavar="PATH", help="write the translated --file here")
    document.add_argument("--protect", action="append", default=[], metavar="REGEX",
                          help="text matching this regular expression is kept as it is (repeatable)")
    parser.add_argument("--v2", action="store_true", help="use the KServe v2 / Triton inference API")
    parser.add_argument("--info", action="store_true", help="print GetModelInfo as JSON and exit")
    parser.add_argument("--request-id", default="", help="client request id, echoed by the server")
    parser.add_argument("--model", default="", help="model of the server's repository (default: the one "
                        f"loaded; with --v2: {MODEL_NAME!r})")
    parser.add_argument("--model-version", default="", help="its version (default: the latest loaded)")
    return parser


def _ids(text: str) -> list[int]:
    """Token ids from "5,17,9"."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"token ids must be comma-separated integers, got {text!r}"
                                         ) from None


def _count(text: str) -> int:
    """An integer >= 0 (the proto fields are unsigned)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**64:  # the widest proto field is a uint64
        raise argparse.ArgumentTypeError(f"must be an integer between 0 and {2**64 - 1}, got {text!r}")
    return value


FORMATS = {"text": pb.DOCUMENT_FORMAT_TEXT, "html": pb.DOCUMENT_FORMAT_HTML,
           "markdown": pb.DOCUMENT_FORMAT_MARKDOWN}  # --format -> DocumentFormat
EXTENSIONS = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown"}  # else text


def document_format(args: argparse.Namespace) -> str:
    """--format, else the format of --file's extension."""
    return args.format or EXTENSIONS.get(args.file.suffix.lower(), "text")


CONTROLS = {  # flag destination -> the option's name (translator.v1 field and KServe v2 parameter alike)
    "length_penalty": "length_penalty", "min_tokens": "min_output_tokens",
    "max_length_ratio": "max_length_ratio",
    "repetition_penalty": "repetition_penalty", "no_repeat_ngram": "no_repeat_ngram_size",
    "temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "seed": "seed",
}


def _options(args: argparse.Namespace) -> pb.TranslateOptions:
    """TranslateOptions from the flags."""
    options = pb.TranslateOptions(
        max_output_tokens=args.max_tokens, beam_size=args.beam, n_best=args.n_best,
        return_scores=args.scores, return_alignment=args.alignment, return_tokens=args.alignment,
        source_language=args.source_language, target_language=args.target_language, task=args.task,
        target_prefix=args.prefix or "", target_prefix_ids=args.prefix_ids or [],
        return_alternatives=args.alternatives, suppress_sequences=args.suppress,
        suppress_sequence_ids=[pb.TranslateOptions.TokenIds(ids=ids) for ids in args.suppress_ids],
        disable_unk=args.disable_unk,
    )
    for flag, field in CONTROLS.items():
        if getattr(args, flag) is not None:
            setattr(options, field, getattr(args, flag))
    return options


def _set_parameter(request: v2.ModelInferRequest, key: str, value: object) -> None:
    """One KServe v2 request parameter by its Python type (a list: its JSON, as a string)."""
    entry = request.parameters[key]
    if isinstance(value, bool):
        entry.bool_param = value
    elif isinstance(value, int):
        entry.int64_param = value
    elif isinstance(value, float):
        entry.double_param = value
    elif isinstance(value, list):
        entry.string_param = json.dumps(value)
    else:
        entry.string_param = str(value)


def print_result(result: pb.TranslationResult, args: argparse.Namespace, out: TextIO) -> None:
    """Print a result's hypotheses (numbered when n-best), scores and alignment as asked."""
    many = len(result.hypotheses) > 1
    for rank, hyp in enumerate(result.hypotheses, 1):
        prefix = f"{rank}. " if many else ""
        out.write(f"{prefix}{hyp.text}\n")
        if args.scores:
            reason = pb.FinishReason.Name(hyp.finish_reason).removeprefix("FINISH_REASON_").lower()
            out.write(f"   score={hyp.score:.4f} log_prob={hyp.log_prob:.4f} finish={reason}\n")
        if args.alignment:
            out.write("   alignment (rows: output tokens, columns: source tokens " +
                      " ".join(result.source_tokens) + ")\n")
            for token, row in zip(hyp.tokens, hyp.alignment, strict=False):
                weights = " ".join(f"{w:.2f}" for w in row.weights)
                out.write(f"   {token:>12} {weights}\n")


def _translate(channel: grpc.Channel, args: argparse.Namespace, out: TextIO) -> None:
    """Native Translate / TranslateStream."""
    stub = pb_grpc.TranslatorStub(channel)
    if args.stream:
        request = pb.TranslateStreamRequest(text=args.texts[0], options=_options(args),
                                            request_id=args.request_id, model=args.model,
                                            model_version=args.model_version)
        pieces = 0
        for message in stub.TranslateStream(request, timeout=args.timeout):
            if message.HasField("piece"):
                out.write(message.piece.text)
                out.flush()
                pieces += 1
            elif pieces:  # the text is out already: end its line, then the details asked for
                out.write("\n")
                if args.scores or args.alignment:
                    print_result(message.result, args, out)
            else:  # beam search: only the final message comes
                print_result(message.result, args, out)
        return
    request = pb.TranslateRequest(texts=args.texts, options=_options(args), request_id=args.request_id,
                                  model=args.model, model_version=args.model_version)
    response = stub.Translate(request, timeout=args.timeout)
    for result in response.results:
        print_result(result, args, out)


def _infer_v2(channel: grpc.Channel, args: argparse.Namespace, out: TextIO) -> None:
    """KServe v2 ModelInfer with a TEXT BYTES tensor."""
    request = v2.ModelInferRequest(model_name=args.model or MODEL_NAME, model_version=args.model_version,
                                   id=args.request_id)
    count = len(args.texts)
    request.inputs.add(name=kserve.INPUT, datatype=kserve.BYTES, shape=[count])
    request.raw_input_contents.append(kserve.serialize_bytes(t.encode("utf-8") for t in args.texts))
    if args.beam:
        request.parameters["beam_size"].int64_param = args.beam
    if args.max_tokens:
        request.parameters["max_output_tokens"].int64_param = args.max_tokens
    for key in ("source_language", "target_language", "task"):
        if getattr(args, key):
            request.parameters[key].string_param = getattr(args, key)
    for flag, key in CONTROLS.items():
        if getattr(args, flag) is not None:
            _set_parameter(request, key, getattr(args, flag))
    if args.prefix:
        _set_parameter(request, "target_prefix", args.prefix)
    if args.prefix_ids:
        _set_parameter(request, "target_prefix_ids", args.prefix_ids)
    if args.suppress or args.suppress_ids:
        _set_parameter(request, "suppress_sequences", [*args.suppress, *args.suppress_ids])
    if args.disable_unk:
        _set_parameter(request, "disable_unk", True)
    response = v2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=args.timeout)
    index = [o.name for o in response.outputs].index(kserve.OUTPUT)
    returned = int(response.outputs[index].shape[0])
    for element in kserve.deserialize_bytes(response.raw_output_contents[index], returned):
        out.write(element.decode("utf-8") + "\n")


def _score(channel: grpc.Channel, args: argparse.Namespace, out: TextIO) -> None:
    """Native Score: one line per (text, target) pair, then its alignment rows when asked."""
    options = pb.ScoreOptions(return_alignment=args.alignment, return_tokens=True,
                              source_language=args.source_language, target_language=args.target_language,
                              task=args.task)
    request = pb.ScoreRequest(sources=args.texts, targets=args.score, options=options, model=args.model,
                              model_version=args.model_version)
    for r in pb_grpc.TranslatorStub(channel).Score(request, timeout=args.timeout).results:
        pieces = " ".join(f"{t}:{lp:.4f}" for t, lp in zip(r.tokens, r.log_probs, strict=True))
        ended = "true" if r.end_token_scored else "false"
        out.write(f"{r.score:.6f}\t{r.log_prob:.6f}\t{pieces}\tend_token_scored={ended}\n")
        for row in r.alignment:
            out.write("  " + " ".join(f"{w:.3f}" for w in row.weights) + "\n")


def _document(channel: grpc.Channel, args: argparse.Namespace, document: str, out: TextIO) -> None:
    """TranslateDocumentStream of the file's text: a progress bar of the segments on stderr, then the
    translated document, byte for byte, to --output or `out`."""
    from tqdm import tqdm  # only here: the client's one use of it

    request = pb.TranslateDocumentRequest(document=document, format=FORMATS[document_format(args)],
                                          options=_options(args), protect=args.protect,
                                          request_id=args.request_id, model=args.model,
                                          model_version=args.model_version)
    parts: list[str] = []
    bar: tqdm | None = None
    try:
        for message in pb_grpc.TranslatorStub(channel).TranslateDocumentStream(request, timeout=args.timeout):
            if message.HasField("start"):
                bar = tqdm(total=message.start.segments, unit="segment", file=sys.stderr,
                           desc=args.file.name, dynamic_ncols=True)
            else:
                parts.append(message.part.text)
                if bar is not None:
                    bar.update(message.part.done - bar.n)
    finally:
        if bar is not None:
            bar.close()
    data = "".join(parts).encode("utf-8")
    if args.output is not None:
        args.output.write_bytes(data)
    elif hasattr(out, "buffer"):  # a real stream: the bytes as they are (no newline translation)
        out.flush()
        out.buffer.write(data)
        out.buffer.flush()
    else:
        out.write(data.decode("utf-8"))


def run(args: argparse.Namespace, out: TextIO, document: str | None = None) -> None:
    """Perform the requested call and print its answer."""
    with tls.open_channel(args.address, args.ca_cert, args.client_cert, args.client_key,
                          args.server_name) as channel:
        if args.info:
            stub = pb_grpc.TranslatorStub(channel)
            which = pb.GetModelInfoRequest(model=args.model, model_version=args.model_version)
            info = stub.GetModelInfo(which, timeout=args.timeout)
            as_dict = json_format.MessageToDict(info, always_print_fields_with_no_presence=True)
            out.write(json.dumps(as_dict, indent=2) + "\n")
        elif document is not None:
            _document(channel, args, document, out)
        elif args.score:
            _score(channel, args, out)
        elif args.v2:
            _infer_v2(channel, args, out)
        else:
            _translate(channel, args, out)


def _read_document(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The text of --file (None without it); a parser error for flags that do not go with it, or a file
    that cannot be read as UTF-8."""
    if args.file is None:
        if args.format or args.output or args.protect:
            parser.error("--format, --output and --protect go with --file")
        return None
    if (args.texts or args.stream or args.score or args.v2 or args.info or args.n_best > 1
            or args.alternatives or args.scores or args.alignment):
        parser.error("--file translates one document, returned whole: give no texts, and no --stream, "
                     "--score, --v2, --info, --n-best, --alternatives, --scores or --alignment")
    try:
        return args.file.read_bytes().decode("utf-8")
    except OSError as exc:
        parser.error(f"--file: {exc}")
    except UnicodeDecodeError as exc:
        parser.error(f"--file {args.file}: not UTF-8 ({exc.reason} at byte {exc.start})")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    document = _read_document(parser, args)
    if not args.info and not args.texts and document is None:
        parser.error("give at least one text (or --info, or --file)")
    if args.score and (len(args.score) != len(args.texts) or args.stream or args.v2 or args.info):
        parser.error("--score: one --score TARGET per text, without --stream, --v2 or --info")
    if args.stream and len(args.texts) != 1:
        parser.error("--stream translates exactly one text")
    if args.v2 and (args.stream or args.alignment or args.scores or args.n_best > 1 or args.alternatives):
        parser.error("--v2 returns translations only: drop --stream, --alignment, --scores, --n-best and "
                     "--alternatives")
    if (args.client_cert is None) != (args.client_key is None):
        parser.error("--client-cert and --client-key go together")
    if args.client_cert and not args.ca_cert:
        parser.error("--client-cert needs --ca-cert (mutual TLS is TLS first)")
    try:
        run(args, out or sys.stdout, document)
    except grpc.RpcError as exc:
        print(f"error: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
