"""The kopf wiring: watches feed an in-memory store, a work queue runs the core's decisions."""
