"""The navigator moved to :mod:`gtsamples.plan.navigator` (the region imports it from here until it is switched)."""

from .plan.navigator import Navigation, navigate_many

__all__ = ["Navigation", "navigate_many"]
