"""The soak's Score and repository requests, beside its translations: Score of long targets (up to the
most a translation can be, cut there without the end token) over gRPC (translator.v1) and HTTP, a target
longer than that (refused), and Triton's repository API over both protocols under the restricted
model-repository group: with the soak's key (the index, a reload of the served model with no gap, an
unload of the repository's spare model, a load with a bad config), and without it or with a wrong value
(refused, UNAVAILABLE / 403 naming the header, before anything changes).

`AdminCases` is a mixin of bench/soak/cases.py's Mix (its runner, texts, references and random generator);
score references come from `Runner.score` of each pair alone.
"""

from __future__ import annotations

import json
from typing import Any

from bench.soak.case import (
    HTTP_REPOSITORY_INDEX,
    HTTP_REPOSITORY_LOAD,
    HTTP_REPOSITORY_UNLOAD,
    HTTP_SCORE,
    REPOSITORY_INDEX,
    REPOSITORY_LOAD,
    REPOSITORY_UNLOAD,
    SCORE,
    VALID_DEADLINE_S,
    Case,
    Reference,
    ScoreReference,
)
from bench.soak.http_cases import MODEL, HttpRequest, json_request
from protos.inference import grpc_service_pb2 as v2
from protos.translator.v1 import translator_pb2 as pb
from service.runtime.runner import Runner

SERVED, SPARE = "translator", "spare"  # the soak repository's models: served, and never loaded
# kind -> share of the mix (bench/soak/cases.py adds them to its own)
ADMIN_MIX: dict[str, float] = {"score_long": 0.03, "http_score_long": 0.02, "score_too_long": 0.01,
                               "repo_keyed": 0.015, "repo_no_key": 0.015, "repo_bad_config": 0.005}
ADMIN_VALID_KINDS = frozenset({"score_long", "http_score_long", "repo_keyed"})
BAD_CONFIGS = ["not json", '{"unknown_setting": 1}', '{"max_batch_size": 100000}']
GRPC_PREFIX = "triton-grpc-protocol-"


class AdminCases:
    """The Score and repository cases of the mix (a mixin: the Mix provides runner, rng, texts, ...)."""

    runner: Runner
    rng: Any
    texts: list[str]
    long_texts: list[str]
    restriction: tuple[str, str]  # the model-repository group's (header key, value)

    def reference(self, text: str, beam: int = 1, max_tokens: int | None = None) -> Reference:
        raise NotImplementedError  # the Mix's

    # ----- long targets ----------------------------------------------------------------------
    def _target_length(self, text: str) -> int:
        """Target tokens of a text (no eos)."""
        return len(self.runner.encode_target([text])[0])

    def _long_pairs(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(source, target) pairs whose targets are as long as can be scored (the cut length or just
        under), and pairs whose targets are longer (cached)."""
        if not hasattr(self, "_pairs"):
            most = self.runner.spec.max_output_tokens  # a one-pair model forces no language token
            words = [w for t in self.long_texts for w in self.reference(t).text.split()] or ["a"]
            fitting, over = [], []
            for start in range(min(8, len(words))):
                target, index = "", start
                while index < start + 4 * most:
                    candidate = f"{target} {words[index % len(words)]}".strip()
                    if self._target_length(candidate) > most:
                        over.append((self.long_texts[start % len(self.long_texts)], candidate))
                        break
                    target, index = candidate, index + 1
                if target:
                    fitting.append((self.long_texts[start % len(self.long_texts)], target))
            self._pairs = fitting, over or [(self.long_texts[0], " ".join(words * (most + 1)))]
        return self._pairs

    def score_reference(self, source: str, target: str) -> ScoreReference:
        """The pair scored alone (cached)."""
        cache = self.__dict__.setdefault("_scores", {})
        if (source, target) not in cache:
            (result,) = self.runner.score([source], [target])
            cache[source, target] = ScoreReference(list(result.target_ids), float(result.log_prob),
                                                   bool(result.end_token_scored))
        return cache[source, target]

    def _scored(self) -> tuple[list[str], list[str], list[ScoreReference]]:
        """1-3 long pairs and their references."""
        fitting, _ = self._long_pairs()
        pairs = [self.rng.choice(fitting) for _ in range(self.rng.choice([1, 1, 2, 3]))]
        return [s for s, _ in pairs], [t for _, t in pairs], [self.score_reference(*p) for p in pairs]

    def _score_long(self) -> Case:
        sources, targets, refs = self._scored()
        request = pb.ScoreRequest(sources=sources, targets=targets)
        return Case("score_long", SCORE, request, VALID_DEADLINE_S, frozenset({"OK"}), scores=refs)

    def _http_score_long(self) -> Case:
        sources, targets, refs = self._scored()
        request = json_request(MODEL + "/score", {"sources": sources, "targets": targets})
        return Case("http_score_long", HTTP_SCORE, request, VALID_DEADLINE_S, frozenset({"OK"}), scores=refs)

    def _score_too_long(self) -> Case:
        _, over = self._long_pairs()
        source, target = self.rng.choice(over)
        if self.rng.random() < 0.5:
            request: Any = pb.ScoreRequest(sources=[source], targets=[target])
            method = SCORE
        else:
            request, method = json_request(MODEL + "/score", {"source": source, "target": target}), HTTP_SCORE
        refused = frozenset({"INVALID_ARGUMENT"})
        return Case("score_too_long", method, request, 30.0, refused, "scores at most")

    # ----- the repository API ----------------------------------------------------------------
    def _repository(self, kind: str, action: str, model: str, header: tuple[str, str] | None,
                    config: str | None = None) -> Case:
        """A repository call over gRPC or HTTP (chosen here) with `header` ((key, value); None: none),
        answered OK when the header is the restriction's, else refused naming it."""
        key, value = self.restriction
        opens = header == (key, value)
        if self.rng.random() < 0.5:
            path = {"index": "/v2/repository/index", "load": f"/v2/repository/models/{model}/load",
                    "unload": f"/v2/repository/models/{model}/unload"}[action]
            body = {} if config is None else {"parameters": {"config": config}}
            headers = {"Content-Type": "application/json"} | (dict([header]) if header else {})
            method = {"index": HTTP_REPOSITORY_INDEX, "load": HTTP_REPOSITORY_LOAD,
                      "unload": HTTP_REPOSITORY_UNLOAD}[action]
            request: Any = HttpRequest(path, json.dumps(body).encode(), headers)
            metadata: tuple[tuple[str, str], ...] = ()
            refusal, expected = "PERMISSION_DENIED", key
        else:
            method = {"index": REPOSITORY_INDEX, "load": REPOSITORY_LOAD, "unload": REPOSITORY_UNLOAD}[action]
            request = {"index": lambda: v2.RepositoryIndexRequest(),
                       "load": lambda: v2.RepositoryModelLoadRequest(model_name=model),
                       "unload": lambda: v2.RepositoryModelUnloadRequest(model_name=model)}[action]()
            if config is not None:
                request.parameters["config"].string_param = config
            metadata = ((GRPC_PREFIX + header[0].lower(), header[1]),) if header else ()
            refusal, expected = "UNAVAILABLE", GRPC_PREFIX + key.lower()
        if not opens:
            return Case(kind, method, request, 30.0, frozenset({refusal}), f"expecting header '{expected}'",
                        metadata=metadata)
        if config is not None:  # a bad one: refused before anything is loaded
            refused = frozenset({"INVALID_ARGUMENT"})
            return Case(kind, method, request, 30.0, refused, "config", metadata=metadata)
        return Case(kind, method, request, VALID_DEADLINE_S, frozenset({"OK"}), metadata=metadata,
                    loads=action == "load")

    def _repo_keyed(self) -> Case:
        """With the key: the index, a reload of the served model, or an unload of the spare one: OK."""
        action, model = self.rng.choice([("index", ""), ("index", ""), ("load", SERVED), ("unload", SPARE)])
        return self._repository("repo_keyed", action, model, self.restriction)

    def _repo_no_key(self) -> Case:
        """Without the key, or with a wrong value: refused before it is handled, naming the header."""
        key, value = self.restriction
        header = self.rng.choice([None, (key, value + "x"), (key, value[:-1]), (key + "-other", value)])
        calls = [("index", ""), ("load", SERVED), ("unload", SERVED), ("load", SPARE)]
        return self._repository("repo_no_key", *self.rng.choice(calls), header)

    def _repo_bad_config(self) -> Case:
        """With the key, a load of the spare model with a bad config: INVALID_ARGUMENT, nothing loaded."""
        config = self.rng.choice(BAD_CONFIGS)
        return self._repository("repo_bad_config", "load", SPARE, self.restriction, config)
