"""The operator's wiring: watches feed an in-memory store of facts, a work queue runs the core's
decisions, and the applier carries out what they return (status first, then Jobs and Events)."""
