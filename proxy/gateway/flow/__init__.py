"""The admission queue before an overload refusal (``queue.py``), the place a request takes
in it (``priority.py``) and the drain rate its Retry-After is made of (``drain.py``)."""

from proxy.gateway.flow.drain import DrainRate
from proxy.gateway.flow.priority import (
    OBJECTIVE_HEADER,
    PRIORITY_HEADER,
    place_of,
    requested_priority,
)
from proxy.gateway.flow.queue import AdmissionQueue, Place, QueueRefusal

__all__ = [
    "OBJECTIVE_HEADER",
    "PRIORITY_HEADER",
    "AdmissionQueue",
    "DrainRate",
    "Place",
    "QueueRefusal",
    "place_of",
    "requested_priority",
]
