"""Registry of pretrained checkpoints: `<root>/<name>/<version>/{model.safetensors, card.json}`.

A name may have checkpoints for several networks (the card's `network`, "ieee33" when absent): a
checkpoint's input and output widths are its network's, so the newest version per (name, network)
is served, and `get(name, network)` picks it. Width-free models (models.physics_fit) serve every
network, built for each on first use. Loading checks each checkpoint (card fields, sha256 of the
weights, config, tensor names and shapes), places it on the GPU when there is one, runs a warm-up
forward pass, and refuses a corrupted or incompatible checkpoint with a clear reason while the
others still load.

Only the newest version per (name, network) is loaded at start (the next older one when it is refused):
start-up time and memory then grow with the models served, not with the releases kept. Older versions
are listed (`available`) from their cards and loaded on first use when a caller pins one
(`get(name, network, version=...)`), a few at a time (PINNED_VERSIONS, least recently used dropped).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from models.config import ModelConfig
from models.limits import MAX_CONTEXT_ROWS
from models.memory import retain_freed_memory
from models.model import DVAPFN
from models.pfn import PFNMethod
from models.predictive import Method

log = logging.getLogger(__name__)

WEIGHTS = "model.safetensors"
CARD = "card.json"
DEFAULT_ROOT = Path(__file__).parent / "registry"
REQUIRED_CARD_FIELDS = ("name", "version", "config", "features", "outputs", "context_size", "weights_sha256")


class CheckpointError(ValueError):
    """A checkpoint that cannot be served, with the reason."""


MethodT = TypeVar("MethodT", bound=Method, covariant=True)


@dataclass
class LoadedModel(Generic[MethodT]):
    """A servable model: its card and its method (a checkpoint's PFNMethod, physics-fit's
    PhysicsBaseMethod; `LoadedModel[PFNMethod]` where a caller needs the network itself)."""

    name: str
    version: str
    card: dict[str, Any]
    method: MethodT
    device: str


DEFAULT_NETWORK = "ieee33"  # the network of a card that names none (cards before networks were named)
EVERY_NETWORK = "*"  # the network of a checkpoint that serves every feeder (ModelConfig.inputs="principal")
BUILT_FOR_NETWORKS = 64  # width-free models built per network and kept (uploads come and go)
# Older versions loaded because a request pinned them, kept at once: pins are for comparing or holding
# back a release, a handful at a time; each is a few MB of weights.
PINNED_VERSIONS = 4


@dataclass(frozen=True)
class Candidate:
    """A checkpoint found in the registry: where it is and its card (read, not yet checked)."""

    directory: Path
    card: dict[str, Any]

    @property
    def version(self) -> str:
        return str(self.card["version"])


class ModelNotServed(LookupError):
    """No model `name`, or none for `network`; says what the name serves and what serves the network."""

    def __init__(self, name: str, network: str, serves: list[str], models_for: list[str]) -> None:
        self.name, self.network, self.serves, self.models_for = name, network, serves, models_for
        told = (
            f"model {name!r} does not serve network {network!r} (it serves {', '.join(serves)})"
            if serves
            else f"there is no model {name!r}"
        )
        super().__init__(f"{told}; models serving {network!r}: {', '.join(models_for) or 'none'}")

    @property
    def unknown(self) -> bool:
        return not self.serves


class VersionNotServed(LookupError):
    """A pinned version that `name` does not have for `network`, or that was refused on loading
    (`reason`); says which versions there are."""

    def __init__(self, name: str, network: str, version: str, versions: list[str], reason: str | None = None) -> None:
        self.name, self.network, self.version, self.versions, self.reason = name, network, version, versions, reason
        told = (
            f"version {version!r} of model {name!r} for network {network!r} cannot be served: {reason}"
            if reason
            else f"model {name!r} has no version {version!r} for network {network!r}"
        )
        super().__init__(f"{told}; versions: {', '.join(versions) or 'none'}")


def card_network(card: dict[str, Any]) -> str:
    return str(card.get("network") or DEFAULT_NETWORK)


@dataclass
class Registry:
    """Checkpoints per (name, network), width-free models, and the refused checkpoints' reasons.

    `models` is one checkpoint per name (its DEFAULT_NETWORK one where it has one, else its newest
    network's): the view of callers that serve one network (bench/, `load_registry(network=...)`)."""

    checkpoints: dict[tuple[str, str], LoadedModel[Method]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # "<name>/<version>" -> why it was refused
    width_free: dict[str, Callable[[Any], LoadedModel[Method]]] = field(default_factory=dict)  # name -> build(network)
    width_free_cards: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> its card on no network
    models: dict[str, LoadedModel[Method]] = field(default_factory=dict)
    any_network: dict[str, LoadedModel[Method]] = field(default_factory=dict)  # checkpoints of every feeder, unbound
    # (name, network) -> version -> checkpoint, every version found (served or not), for pinning and listing
    available: dict[tuple[str, str], dict[str, Candidate]] = field(default_factory=dict)
    load_options: dict[str, Any] = field(default_factory=dict)  # load_checkpoint's device/calibrate for pins
    pinned_versions: int = PINNED_VERSIONS
    _built: OrderedDict[tuple[str, str], LoadedModel[Method]] = field(default_factory=OrderedDict, repr=False)
    _pinned: OrderedDict[tuple[str, str, str], LoadedModel[Method]] = field(default_factory=OrderedDict, repr=False)
    _guards: dict[tuple[str, str, str], LoadedModel[Method]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, loaded: LoadedModel[Method]) -> None:
        """Serve `loaded` unless a newer version of its (name, network) is served already."""
        key = (loaded.name, card_network(loaded.card))
        current = self.checkpoints.get(key)
        if current is None or _version_key(loaded.version) > _version_key(current.version):
            self.checkpoints[key] = loaded
        self._by_name()

    def refuse(self, name: str, network: str, why: str) -> None:
        """Stop serving a checkpoint that loaded but failed later (the service's warm-up)."""
        loaded = self.checkpoints.pop((name, network), None)
        self.errors[f"{name}/{loaded.version if loaded else '?'}"] = why
        self._by_name()

    def _by_name(self) -> None:
        self.models.clear()
        for (name, network), loaded in sorted(self.checkpoints.items()):
            if name not in self.models or network == DEFAULT_NETWORK:
                self.models[name] = loaded

    def names(self) -> list[str]:
        """Every served model name, checkpoints and width-free."""
        return sorted({name for name, _ in self.checkpoints} | set(self.width_free))

    def versions(self, name: str) -> dict[str, str]:
        """network -> served version of a checkpoint model (empty for a width-free one)."""
        return {net: loaded.version for (n, net), loaded in sorted(self.checkpoints.items()) if n == name}

    def available_versions(self, name: str) -> dict[str, list[str]]:
        """network -> every version a request may pin, newest first (the served one among them;
        `{"*": [version]}` for a width-free model). Networks with no served version are left out."""
        if name in self.width_free:
            return {"*": [str(self.width_free_cards[name]["version"])]}
        served = self.versions(name)
        return {net: _newest_first(self.available.get((name, net), {}), served[net]) for net in served}

    def loaded_versions(self) -> list[tuple[str, str, str]]:
        """(name, network, version) of the older versions loaded now because requests pinned them."""
        with self._lock:
            return list(self._pinned)

    def networks_of(self, name: str) -> list[str]:
        """What `name` serves, in words for a width-free model."""
        if name in self.width_free:
            from models.physics_fit import ANY_NETWORK

            return [ANY_NETWORK]
        return list(self.versions(name))

    def models_for(self, network: str) -> list[str]:
        """Names that serve `network` (a built-in name or an uploaded network's id)."""
        return sorted({n for n, net in self.checkpoints if net == network} | set(self.width_free))

    def get(self, name: str, network: Any = DEFAULT_NETWORK, version: str | None = None) -> LoadedModel[Method]:
        """The model `name` for `network` (a built-in name or a gridsim Network); ModelNotServed when none.

        version: that version instead of the served one (loaded on first use); VersionNotServed when the
        model has no such version for the network or it cannot be loaded."""
        network_id = network if isinstance(network, str) else network.name
        loaded = self.checkpoints.get((name, network_id))
        if version is not None:
            pinned = self._pinned_version(name, network, network_id, str(version), loaded)
            return pinned if name in self.width_free else self._guarded(pinned, network)
        if loaded is not None:
            return self._guarded(loaded, network)
        if name not in self.width_free:
            raise ModelNotServed(name, network_id, self.networks_of(name), self.models_for(network_id))
        with self._lock:  # request threads and the event loop both ask; build once
            loaded = self._built.get((name, network_id))
            if loaded is None:
                if isinstance(network, str):
                    from gridsim.network import network as built_in

                    network = built_in(network)  # ValueError for a name gridsim does not know
                loaded = self._built[(name, network_id)] = self.width_free[name](network)
                while len(self._built) > BUILT_FOR_NETWORKS:
                    self._built.popitem(last=False)
            self._built.move_to_end((name, network_id))
        return loaded

    def _guarded(self, loaded: LoadedModel[Method], network: Any) -> LoadedModel[Method]:
        """A checkpoint as served: its spread widened off the context (models.off_context.OffContextGuard)
        by the network model's power flow (built once per checkpoint and network; the imports only then)."""
        network_id = network if isinstance(network, str) else network.name
        key = (loaded.name, network_id, loaded.version)
        guarded = self._guards.get(key)  # every request passes here: no lock once built
        if guarded is not None and guarded.method.base is loaded.method:  # type: ignore[attr-defined]
            return guarded
        with self._lock:
            guarded = self._guards.get(key)
            if guarded is None or guarded.method.base is not loaded.method:  # type: ignore[attr-defined]
                from gridsim.api import VoltageModel
                from models import network_fit, physics_fit
                from models.off_context import OffContextGuard

                voltages = VoltageModel(network)  # probed with its physics base (OffContextGuard's `prober`)
                method = OffContextGuard(
                    loaded.method,
                    voltages,
                    physics_fit.method_for(voltages.network),
                    denoiser=network_fit.method_for(voltages.network, voltages),
                )
                guarded = self._guards[key] = replace(loaded, method=method)
        return guarded

    def _pinned_version(
        self, name: str, network: Any, network_id: str, version: str, served: LoadedModel[Method] | None
    ) -> LoadedModel[Method]:
        if served is not None and served.version == version:
            return served
        if name in self.width_free:
            built = self.get(name, network)  # ModelNotServed for a network gridsim does not know
            if built.version != version:
                raise VersionNotServed(name, network_id, version, [built.version])
            return built
        if served is None:
            raise ModelNotServed(name, network_id, self.networks_of(name), self.models_for(network_id))
        found = self.available.get((name, network_id), {})
        candidate = found.get(version)
        if candidate is None:
            raise VersionNotServed(name, network_id, version, _newest_first(found, served.version))
        key = (name, network_id, version)
        with self._lock:  # request threads and the event loop both ask; load once
            loaded = self._pinned.get(key)
            if loaded is None:
                refused = self.errors.get(_error_key(candidate.directory))
                if refused is not None:
                    raise VersionNotServed(name, network_id, version, _newest_first(found, served.version), refused)
                try:
                    loaded = load_checkpoint(candidate.directory, **self.load_options)
                except CheckpointError as exc:
                    log.error("refusing pinned checkpoint %s: %s", _error_key(candidate.directory), exc)
                    self.errors[_error_key(candidate.directory)] = str(exc)
                    raise VersionNotServed(
                        name, network_id, version, _newest_first(found, served.version), str(exc)
                    ) from None
                log.info("loaded pinned model %s version %s for %s on %s", name, version, network_id, loaded.device)
                self._pinned[key] = loaded
                while len(self._pinned) > max(self.pinned_versions, 1):
                    self._pinned.popitem(last=False)
            self._pinned.move_to_end(key)
        return loaded


def _newest_first(found: dict[str, Candidate], served: str) -> list[str]:
    return sorted(set(found) | {served}, key=_version_key, reverse=True)


def _error_key(directory: Path) -> str:
    return f"{directory.parent.name}/{directory.name}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def write_checkpoint(model: DVAPFN, card: dict[str, Any], directory: str | Path) -> Path:
    """Write weights then card (with the weights' sha256) atomically into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (WEIGHTS + ".tmp")
    save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}, str(tmp))
    os.chmod(tmp, 0o644)
    os.replace(tmp, directory / WEIGHTS)
    _write_card(directory, {**card, "config": model.cfg.to_dict(), "weights_sha256": sha256_file(directory / WEIGHTS)})
    return directory


def update_card(directory: str | Path, section: str, value: Any) -> Path:
    """Set one section of a checkpoint's card (its accuracy, its calibration), atomically; the weights
    and their sha256 are untouched."""
    path = Path(directory) / CARD
    card = json.loads(path.read_text())
    card[section] = value
    return _write_card(Path(directory), card)


def _write_card(directory: Path, card: dict[str, Any]) -> Path:
    tmp = directory / (CARD + ".tmp")
    tmp.write_text(json.dumps(card, indent=2) + "\n")
    os.replace(tmp, directory / CARD)
    return directory / CARD


def load_checkpoint(
    directory: str | Path, device: str | None = None, warmup: bool = True, calibrate: bool = True
) -> LoadedModel[PFNMethod]:
    """Load and check one checkpoint directory; raises CheckpointError with the reason.

    calibrate: the in-context spread calibration of every fit (models.calibration) on or off.
    """
    directory = Path(directory)
    device = device or default_device()
    card = read_card(directory)
    weights = directory / WEIGHTS
    if not weights.exists():
        raise CheckpointError(f"{directory}: {WEIGHTS} is missing")
    actual = sha256_file(weights)
    if actual != card["weights_sha256"]:
        raise CheckpointError(f"{directory}: sha256 of {WEIGHTS} is {actual}, card says {card['weights_sha256']}")
    try:
        cfg = ModelConfig.from_dict(card["config"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{directory}: invalid config: {exc}") from exc
    if cfg.any_network != (card_network(card) == EVERY_NETWORK):
        raise CheckpointError(
            f"{directory}: card network {card_network(card)!r} and config inputs {cfg.inputs!r} disagree "
            f"(a checkpoint of any feeder has inputs 'principal' and network {EVERY_NETWORK!r})"
        )
    if not cfg.any_network:
        if len(card["features"]) != cfg.d_in:
            raise CheckpointError(
                f"{directory}: card lists {len(card['features'])} features, config d_in is {cfg.d_in}"
            )
        _check_network(directory, card)
    model = DVAPFN(cfg)
    _check_tensors(directory, weights, model)
    model.load_state_dict(load_file(str(weights)))
    try:
        method = PFNMethod(
            model,
            device=device,
            calibrate=calibrate,
            heldout_slope=(card.get("calibration") or {}).get("heldout_slope", 0.0),
        )
    except ValueError as exc:  # the card's slope, checked by PFNMethod
        raise CheckpointError(f"{directory}: card calibration.{exc}") from exc
    if warmup:
        _warm_up(method, card)
    return LoadedModel(card["name"], str(card["version"]), {**card, "device": device}, method, device)


def read_card(directory: Path) -> dict[str, Any]:
    """A checkpoint's card with every required field; CheckpointError otherwise (nothing else is checked)."""
    try:
        card = json.loads((directory / CARD).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{directory}: unreadable {CARD}: {exc}") from exc
    if not isinstance(card, dict):
        raise CheckpointError(f"{directory}: {CARD} is not a JSON object")
    missing = [f for f in REQUIRED_CARD_FIELDS if f not in card]
    if missing:
        raise CheckpointError(f"{directory}: card lacks field(s) {missing}")
    return card


def _check_network(directory: Path, card: dict[str, Any]) -> None:
    """A card for a built-in network names that network's features and outputs, in its order."""
    from gridsim.network import KNOWN_NETWORKS, network

    name = card_network(card)
    if name not in KNOWN_NETWORKS:
        return  # a feeder served by its uploaded id: its widths are checked against each request's network
    net = network(name)
    for what, names in (("features", net.feature_names), ("outputs", net.output_names)):
        if list(card[what]) != list(names):
            raise CheckpointError(
                f"{directory}: card {what} ({len(card[what])}) are not network {name}'s "
                f"{len(names)} {what} in its order"
            )


def _check_tensors(directory: Path, weights: Path, model: DVAPFN) -> None:
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    try:
        with safe_open(str(weights), framework="pt") as handle:
            found = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}
    except Exception as exc:  # safetensors raises its own error types for malformed files
        raise CheckpointError(f"{directory}: unreadable weights: {exc}") from exc
    if set(found) != set(expected):
        raise CheckpointError(
            f"{directory}: tensor names differ from the config's model: missing {sorted(set(expected) - set(found))[:5]}, "
            f"unexpected {sorted(set(found) - set(expected))[:5]}"
        )
    for name, shape in expected.items():
        if found[name] != shape:
            raise CheckpointError(f"{directory}: tensor {name} has shape {found[name]}, config expects {shape}")


# A checkpoint of any feeder warms up bound to a small made-up one: this many load buses, each its own output.
WARM_UP_LOADS = 4


def _warm_up(method: PFNMethod, card: dict[str, Any]) -> None:
    """One forward pass at the smallest supported context, so the first request is not slow."""
    rng = np.random.default_rng(0)
    n = int(card["context_size"]["min"])
    if method.model.cfg.any_network:
        # a probed checkpoint's voltages here are the warm-up's own made-up feeder, not a power flow
        method = method.on_network(
            range(WARM_UP_LOADS), voltages=lambda rows: 1.0 + 1e-3 * rows[:, :1] @ np.ones((1, WARM_UP_LOADS))
        )
        k = WARM_UP_LOADS
    else:
        k = len(card["outputs"])
    x = rng.normal(size=(n + 4, method.d_in))
    y = x[:, :1] @ np.ones((1, k)) * 1e-3 + 1.0 + 1e-4 * rng.normal(size=(n + 4, k))
    predictive = method.predict(method.fit(x[:n], y[:n]), x[n:])
    if not np.isfinite(predictive.mean).all():
        raise CheckpointError(f"{card['name']}: warm-up produced non-finite predictions")


def any_network_builder(loaded: LoadedModel[PFNMethod]) -> Callable[[Any], LoadedModel[Method]]:
    """Serves a checkpoint of any feeder on one network: its weights bound to the network's load positions
    (shared, not copied), its spread widened off the context like every checkpoint's and, as physics-fit's, by the
    network model's miss at every query (`within_reach`): its bars are calibrated within the context's season, and a
    context from one season held 0.76-0.88 of the worst bus in another (SimBench, exact readings)."""
    from gridsim.api import VoltageModel
    from models import network_fit, physics_fit
    from models.off_context import OffContextGuard
    from models.physics_fit import on_network

    def build(network: Any) -> LoadedModel[Method]:
        voltages = VoltageModel(network)  # one power-flow model for the checkpoint's probe and the guard
        method = OffContextGuard(
            loaded.method.on_network(network.load_positions, voltages),
            voltages,
            physics_fit.method_for(network),
            within_reach=True,
            denoiser=network_fit.method_for(network, voltages),
        )
        return LoadedModel(loaded.name, loaded.version, on_network(loaded.card, network), method, loaded.device)

    return build


def width_free_builder(name: str, max_context: int) -> Callable[[Any], LoadedModel[Method]]:
    """Builds a width-free model ("physics-fit": models.physics_fit, "network-fit": models.network_fit) for
    one network. physics-fit's spread is widened by the network model's miss at every query, and further off the
    context (models.off_context.OffContextGuard, `within_reach`)."""
    from gridsim.api import VoltageModel
    from models import network_fit, physics_fit
    from models.off_context import OffContextGuard

    kind = {physics_fit.NAME: physics_fit, network_fit.NAME: network_fit}[name]

    def build(network: Any) -> LoadedModel[Method]:
        method: Method = kind.method_for(network)
        if kind is physics_fit:
            voltages = VoltageModel(network)
            method = OffContextGuard(
                method, voltages, within_reach=True, denoiser=network_fit.method_for(network, voltages)
            )
        return LoadedModel(kind.NAME, kind.VERSION, kind.card_for(network, max_context), method, "cpu")

    return build


def load_registry(
    root: str | Path = DEFAULT_ROOT,
    device: str | None = None,
    warmup: bool = True,
    calibrate: bool = True,
    network: str | None = None,
    width_free: bool = False,
    max_context: int = MAX_CONTEXT_ROWS,
    retain_memory: bool = True,
    pinned_versions: int = PINNED_VERSIONS,
) -> Registry:
    """Every `<name>/<version>` under root; the newest version of each (name, network) is loaded and
    served (the next older one where it is refused), the others are `available` to pin.

    network: only checkpoints for that network. width_free: also serve "physics-fit" on every
    network, with contexts of up to `max_context` rows (the service's GRIDPFN_MAX_CONTEXT_ROWS).
    retain_memory: keep freed memory for the next request (models.memory; the service's
    GRIDPFN_RETAIN_FREED_MEMORY), as everything that serves or measures the registry does.
    pinned_versions: older versions kept loaded at once for requests that pin them."""
    if retain_memory:
        retain_freed_memory()
    registry = Registry(
        load_options={"device": device, "warmup": warmup, "calibrate": calibrate}, pinned_versions=pinned_versions
    )
    from models import network_fit, physics_fit

    if width_free:
        for kind in (network_fit, physics_fit):
            registry.width_free[kind.NAME] = width_free_builder(kind.NAME, max_context)
            registry.width_free_cards[kind.NAME] = kind.general_card(max_context)
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"model_dir: {root} is not a directory")
    registry.available = _scan(root, network, registry.errors)
    for (_, network_name), found in registry.available.items():
        if network_name == EVERY_NETWORK and not width_free:
            continue  # a checkpoint of every feeder is served with the width-free models only: not even loaded
        for version in sorted(found, key=_version_key, reverse=True):
            directory = found[version].directory
            try:
                loaded = load_checkpoint(directory, device=device, warmup=warmup, calibrate=calibrate)
            except CheckpointError as exc:
                log.error("refusing checkpoint %s: %s", _error_key(directory), exc)
                registry.errors[_error_key(directory)] = str(exc)
                continue
            if loaded.method.model.cfg.any_network:  # served per network on first use, as the width-free models
                registry.any_network[loaded.name] = loaded
                registry.width_free[loaded.name] = any_network_builder(loaded)
                registry.width_free_cards[loaded.name] = {**loaded.card, "networks": physics_fit.ANY_NETWORK}
            else:
                registry.add(loaded)
            log.info(
                "loaded model %s version %s for %s on %s",
                loaded.name,
                loaded.version,
                card_network(loaded.card),
                loaded.device,
            )
            break  # older versions load when a request pins one
    return registry


def _scan(root: Path, network: str | None, errors: dict[str, str]) -> dict[tuple[str, str], dict[str, Candidate]]:
    """Every checkpoint's card under root by (name, network) and version; unreadable cards go to `errors`."""
    found: dict[tuple[str, str], dict[str, Candidate]] = {}
    for card_path in sorted(root.glob(f"*/*/{CARD}")):
        directory = card_path.parent
        try:
            card = read_card(directory)
        except CheckpointError as exc:
            log.error("refusing checkpoint %s: %s", _error_key(directory), exc)
            errors[_error_key(directory)] = str(exc)
            continue
        if network is not None and card_network(card) != network:
            continue
        versions = found.setdefault((str(card["name"]), card_network(card)), {})
        other = versions.get(str(card["version"]))
        if other is not None:
            errors[_error_key(directory)] = (
                f"{directory}: the same name, network and version as {_error_key(other.directory)}, which is used"
            )
            continue
        versions[str(card["version"])] = Candidate(directory, card)
    return found


def _version_key(version: str) -> tuple[tuple[int, int, str], ...]:
    """Numeric parts compare as numbers, others as text after any number (so no int-vs-str comparison)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in version.replace("-", ".").split("."))
