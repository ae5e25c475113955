"""The Kombu transport over the store (``alkstore+postgresql://…``, ``alkstore+sqlite:///…``)."""

from .channel import Channel
from .transport import Transport

__all__ = ["Channel", "Transport"]
