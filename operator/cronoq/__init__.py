"""cronoq: a Kubernetes operator that runs tasks as pods with the guarantees of a task queue."""

__version__ = "0.1.0"

from cronoq.worker.errors import Permanent, Retryable  # noqa: E402  (the SDK's exceptions, importable as cronoq.X)

__all__ = ["Permanent", "Retryable", "__version__"]
