"""The Kubernetes I/O layer: reading API objects into the core's facts, and the writes cronoq makes."""
