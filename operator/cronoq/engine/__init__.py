"""The pure core: every decision cronoq makes, with no I/O and the clock passed in.

`attempts` (the Task state machine) with `plan` (what a decision reads and
returns) and `conditions`, `outcome` (what an ended attempt means), `backoff` (when the next
attempt may start), `admission` (which queued tasks get a pool slot), `gate` with `keys` and
`dependencies` (whether a new task may start at all), `retention` (when finished work goes),
`election` (leader election by Lease), `jobs` and `naming` (the Job and Lease of an attempt),
`observed` (the facts of a Job and its pod), `reasons` (every reason string), `pools` (pool
status), `schedule` (TaskSchedule fire times). The kube
and controller layers observe the cluster, call these, and apply what they return.
"""
