"""The lookups of the model repository: what a request's (model, version) resolves to, one resolver for every
protocol (`find`), and how the request metrics label it. Aliases (ModelMesh's ids) apply here only, never to a
name of a repository model; only names the repository has become label values."""

from __future__ import annotations

from service.domain.errors import InvalidInput, UnknownModel
from service.domain.text import shown
from service.models.layout import RepositoryLayout
from service.models.naming import check_name, check_version
from service.models.served import Resolved, ServedModel
from service.ops import metrics


class Lookups:
    """The repository's resolver over its served models, aliases and layout (ModelRepository sets them)."""

    layout: RepositoryLayout
    models: dict[str, dict[int, ServedModel]]
    aliases: dict[str, str]

    def find(self, name: str, version: str = "", on_disk: bool = True) -> Resolved:
        """The model a request addresses ("" = the one loaded model, an alias = its model), labelling the
        request metrics with it. InvalidInput for a malformed name or version, or "" without exactly one
        loaded model; UnknownModel for a model the repository lacks, and (on_disk) for a version neither
        loaded nor on disk. Requests, which need a loaded version (`use`), pass on_disk=False."""
        found, label, error = self._lookup(name, version)
        metrics.served_by(*label)
        if error is not None:
            raise error
        if on_disk and found.model is None:
            entry = self.layout.entry(found.name)  # the model's folder as it is now (it may have gone)
            if found.version is not None and found.version not in entry.versions:
                raise UnknownModel(f"model {shown(found.name)} has no version '{found.version}'; the "
                                   f"repository has {sorted(entry.versions)}")
        return found

    def label(self, name: str, version: str = "") -> tuple[str, str]:
        """The request metrics' (model, version) of a request for name / version: the model it resolves to
        and the loaded version it gets ("" when none), NO_MODEL for "" without exactly one loaded model,
        UNKNOWN_MODEL for a name the repository lacks. Never raises."""
        return self._lookup(name, version)[1]

    def known(self, name: str, version: str = "") -> tuple[str, int | None]:
        """find(name, version)'s (model, version): UnknownModel unless the repository has them."""
        found = self.find(name, version)
        return found.name, found.version

    def ready(self, name: str, version: str = "") -> bool:
        """Whether that model (version) is loaded and ready (UnknownModel for one the repository lacks)."""
        model = self.find(name, version).model
        return model is not None and model.ready

    def _lookup(self, name: str, version: str) -> tuple[Resolved, tuple[str, str], Exception | None]:
        """The resolver: what (name, version) resolves to, its metrics label, and why a lookup of it fails
        (None: it does not). The one place "" and aliases are resolved; reads the disk only for a model
        that is not loaded."""
        if not name:
            loaded = sorted(self.models)
            if len(loaded) != 1:
                error = InvalidInput(f"name a model: this server has {len(loaded)} loaded "
                                     f"({loaded or self._names()})")
                return Resolved(name, None, None), (metrics.NO_MODEL, ""), error
            name = loaded[0]
        if name in self.aliases and name not in self.models and not self.layout.has(name):
            name = self.aliases[name]  # an alias never shadows a model of the repository
        served = self.models.get(name, {})
        known = bool(served) or name in self._names()  # a malformed name is never among them
        number, error = None, None
        try:
            check_name(name)
            number = check_version(version) if version else None
        except InvalidInput as exc:
            error = exc
        if error is None and not known:
            error = UnknownModel(f"unknown model {shown(name)}; the repository has {self._names()}")
        model = served.get(max(served) if number is None else number) if served and error is None else None
        label = (name, str(model.version) if model else "") if known else (metrics.UNKNOWN_MODEL, "")
        return Resolved(name, number, model), label, error

    def _names(self) -> list[str]:
        """The models of the repository ([] when its folder cannot be read)."""
        try:
            return self.layout.names()
        except OSError:
            return []

    def loaded(self, name: str | None = None) -> list[ServedModel]:
        """Every loaded model version (of model `name` only, if given), by name and version."""
        chosen = self.models.items() if name is None else [(name, self.models.get(name, {}))]
        return [versions[v] for _, versions in sorted(chosen) for v in sorted(versions)]
