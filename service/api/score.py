"""The translator.v1 Score RPC: protobuf <-> domain types around `Scheduler.score`, nothing more.

`TranslatorServicer.Score` (service/api/translator.py) hands its calls here. Errors are domain
exceptions mapped to gRPC statuses by service/api/interceptor.py (service/api/status.py's table).
"""

from __future__ import annotations

import logging
import uuid

from grpc import aio

from protos.translator.v1 import translator_pb2 as pb
from service.api.common import deadline_of
from service.domain.errors import InvalidInput
from service.domain.types import ScoreOptions, ScoreResult
from service.models.repository import ModelRepository
from service.runtime.runner import Runner

log = logging.getLogger(__name__)


def score_options(options: pb.ScoreOptions) -> ScoreOptions:
    """ScoreOptions of the request's options (empty language = not given)."""
    return ScoreOptions(with_alignment=options.return_alignment,
                        source_language=options.source_language or None,
                        target_language=options.target_language or None)


def check_pair_count(sources: int, targets: int, max_batch_size: int) -> None:
    """InvalidInput unless 1 <= pairs <= max_batch_size and there are as many targets as sources."""
    if sources < 1:
        raise InvalidInput("no (source, target) pair to score: send at least one source and its target")
    if sources != targets:
        raise InvalidInput(f"{sources} source(s) but {targets} target(s): send one target per source")
    if sources > max_batch_size:
        raise InvalidInput(f"{sources} pairs in one request; this server accepts at most {max_batch_size} "
                           "(max_batch_size)")


def score_message(result: ScoreResult, options: pb.ScoreOptions, runner: Runner) -> pb.ScoreResult:
    """One ScoreResult message; optional fields filled as the options ask."""
    t = result.timings
    message = pb.ScoreResult(
        token_ids=result.target_ids, log_probs=result.log_probs, log_prob=result.log_prob, score=result.score,
        end_token_scored=result.end_token_scored,
        timings=pb.Timings(queue_ms=t.queue_ms, compute_ms=t.compute_ms, total_ms=t.total_ms))
    if options.return_tokens:
        message.tokens.extend(runner.tokenizer.token(i) for i in result.target_ids)
        message.source_tokens.extend(runner.tokenizer.token(i) for i in result.source_ids)
    if options.return_alignment or options.return_tokens:
        message.source_token_ids.extend(result.source_ids)
    if options.return_alignment and result.alignment is not None:
        message.alignment.extend(pb.AlignmentRow(weights=row) for row in result.alignment)
    return message


async def score(models: ModelRepository, request: pb.ScoreRequest, context: aio.ServicerContext
                ) -> pb.ScoreResponse:
    """Score every (source, target) pair of the request; results in request order."""
    request_id = request.request_id or uuid.uuid4().hex
    deadline = deadline_of(context)
    async with models.use(request.model, request.model_version, deadline) as model:
        sources, targets = list(request.sources), list(request.targets)
        check_pair_count(len(sources), len(targets), model.scheduler.settings.max_batch_size)
        log.debug("Score %s: %d pair(s) with %s", request_id, len(sources), model.name)
        results = await model.scheduler.score(sources, targets, score_options(request.options), deadline)
        return pb.ScoreResponse(results=[score_message(r, request.options, model.runner) for r in results],
                                request_id=request_id)
