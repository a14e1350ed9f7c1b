"""The errors of cost-aware routing, one type per cause, so that a caller (locus serve) tells them apart by type."""

from __future__ import annotations


class RoutingError(ValueError):
    """A routing request that cannot be answered; the message says what to change."""


class QualityWeightError(RoutingError):
    """A quality weight outside [0, 1] (or not a number)."""


class CostError(RoutingError):
    """A cost, price, parameter count or cap that is not a number >= 0."""


class NoCandidateWithinCap(RoutingError):
    """Every candidate costs more than ``max_cost`` (or has more parameters than ``max_params``)."""


class CostUnknown(RoutingError):
    """A cost-aware ranking asked for where no candidate has a known cost (or, under ``max_params``, a known size)."""


__all__ = ["RoutingError", "QualityWeightError", "CostError", "NoCandidateWithinCap", "CostUnknown"]
