"""The Task state machine (DESIGN §1–§4), by concern. A reconcile goes down these modules once:

- `machine`: the phases, from the observed Task to one Plan (`reconcile`, `is_ready`, `refusal`);
- `deadlines`: whether the open attempt ended, by its report or a deadline, and its record if so;
- `task_deadlines`: the task's own time limits (startDeadline, deadline, the retry budget in time);
- `cleanup`: the task's Jobs and Leases that are not its open attempt's (`settle` for a finished task);
- `checkpoints`: which checkpoint of the open attempt the status records (fenced like a report);
- `workers`: what a Workers pool changes (the serving worker, the fields only a Job honours);
- `waiting`: why a ready task has no slot, its place in the queue and its limits, worded for its
  message, `cronoq describe` and the dashboard alike;
- `wording`: messages, conditions and the summary, and whether a status said something already.

Each calls only the ones below it (an import-linter contract in pyproject.toml checks it).
"""
from cronoq.engine.attempts.cleanup import OPERATOR_ENDED, settle
from cronoq.engine.attempts.deadlines import NEVER_HEALS
from cronoq.engine.attempts.machine import HISTORY, is_ready, reconcile, refusal
from cronoq.engine.attempts.workers import POD_FIELDS, serving_worker

__all__ = ["HISTORY", "NEVER_HEALS", "OPERATOR_ENDED", "POD_FIELDS", "is_ready", "reconcile", "refusal", "serving_worker",
           "settle"]
