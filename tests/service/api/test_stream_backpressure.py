"""ModelStreamInfer's answers are bounded: a client that stops reading stops the requests' producers (the
answer queue holds at most STREAM_ANSWERS), so its stream cannot grow the server's memory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from protos.inference import grpc_service_pb2 as pb
from service.api.grpc import kserve as servicer_module
from service.api.grpc.kserve import InferenceServicer
from service.dataplane import kserve
from tests.support.polling import until

PER_REQUEST, REQUESTS = 1000, 3


class Producing:
    """A data plane whose every request streams PER_REQUEST answers at once, counting them."""

    stream_slots = 8

    def __init__(self) -> None:
        self.produced = 0
        self.waiting: dict[str, bool] = {}  # request id -> an answer handed over, not taken on yet
        self.finished: set[str] = set()

    async def infer_stream(self, request: kserve.InferRequest, deadline: float | None
                           ) -> AsyncIterator[kserve.InferResponse]:
        for i in range(PER_REQUEST):
            self.produced += 1
            self.waiting[request.id] = True
            yield kserve.InferResponse("m", "1", request.id, [kserve.translation_output(["x"])],
                                       final=i == PER_REQUEST - 1)
            self.waiting[request.id] = False
        self.finished.add(request.id)

    def settled(self) -> bool:
        """Every request's producer has finished, or waits to hand over an answer (nothing else moves)."""
        ids = [str(i) for i in range(REQUESTS)]
        return all(self.waiting.get(i) or i in self.finished for i in ids)


class NoDeadline:
    """The one thing the servicer asks of a call's context."""

    def time_remaining(self) -> None:
        return None


def test_a_client_that_stops_reading_stops_the_producers():
    async def main() -> tuple[int, int]:
        plane = Producing()

        async def requests() -> AsyncIterator[pb.ModelInferRequest]:
            for i in range(REQUESTS):
                yield pb.ModelInferRequest(model_name="m", id=str(i))

        answers = InferenceServicer(plane).ModelStreamInfer(requests(), NoDeadline())
        first = await anext(answers)  # the client reads one answer, then stops reading
        await until(plane.settled, "every producer finished or waiting")
        produced = plane.produced
        await answers.aclose()  # the client goes away: the producers are cancelled
        return produced, len(first.infer_response.outputs)

    produced, outputs = asyncio.run(main())
    assert outputs == 1
    # each producer holds at most the one answer it waits to queue
    assert produced <= servicer_module.STREAM_ANSWERS + 1 + REQUESTS, produced
    assert produced < REQUESTS * PER_REQUEST
