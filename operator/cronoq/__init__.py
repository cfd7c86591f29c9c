"""cronoq: a Kubernetes operator that runs tasks as pods with the guarantees of a task queue."""

__version__ = "0.1.0"
