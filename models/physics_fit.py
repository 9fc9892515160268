""" "physics-fit": the physics base fit alone, served as a model on every radial feeder.

Why a model without weights: a feeder no checkpoint was trained for (any upload, and the built-ins
until their checkpoints land) still gets calibrated-enough voltage distributions from the closed
form that every PFN here is built on (models.physics_base: linear in the loads plus DistFlow's
squares, its held-out error on the context as the spread). It needs only the feeder's load positions, so
the registry builds one per network on demand instead of loading a checkpoint.
"""

from __future__ import annotations

from typing import Any

from models.limits import MIN_CONTEXT_ROWS
from models.physics_base import PhysicsBaseMethod

NAME = "physics-fit"
VERSION = "built-in"
ANY_NETWORK = "any radial feeder"
MIN_CONTEXT = MIN_CONTEXT_ROWS
ANY_FEATURES = "the network's load inputs: P then Q of each load bus (GET /v1/networks/{id})"
ANY_OUTPUTS = "the network's outputs: |V| of each non-slack bus (GET /v1/networks/{id})"


def width_free_card(name: str, description: str, base: str, max_context: int) -> dict[str, Any]:
    """A model without weights, whatever the network (GET /v1/models): physics-fit's and network-fit's."""
    return {
        "name": name,
        "version": VERSION,
        "description": description,
        "architecture": {"kind": "closed form", "base": base},
        "networks": ANY_NETWORK,
        "features": ANY_FEATURES,
        "outputs": ANY_OUTPUTS,
        "context_size": {"min": MIN_CONTEXT, "max": int(max_context)},
    }


def general_card(max_context: int) -> dict[str, Any]:
    return width_free_card(
        NAME,
        "the physics base fit alone (no weights): per bus, linear in the loads plus DistFlow's second-order "
        "branch-flow terms, the feeder's tree recovered from the context; the spread is each bus's held-out "
        "error of the fit on the context (models.physics_base), widened at every query by the fit's own miss "
        "there on the network model's power flow (a regime the context never showed: another season, PV), "
        "and further beyond the context's reach (models.off_context)",
        "physics",
        max_context,
    )


def on_network(card: dict[str, Any], network: Any) -> dict[str, Any]:
    """A width-free model's card on one network: its feature and output names."""
    return {
        **card,
        "network": network.name,
        "features": list(network.feature_names),
        "outputs": list(network.output_names),
    }


def card_for(network: Any, max_context: int) -> dict[str, Any]:
    return on_network(general_card(max_context), network)


def method_for(network: Any) -> PhysicsBaseMethod:
    return PhysicsBaseMethod(load_positions=network.load_positions)
