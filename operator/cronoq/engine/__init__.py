"""The pure core: every decision cronoq makes, with no I/O, no kopf, and the clock passed in.

`backoff` (when the next attempt may start), `outcome` (what an ended attempt means),
`attempts` (the Task state machine), `admission` (which queued tasks get a pool slot),
`jobs` (the Job manifest of an attempt). The kube and controller layers observe the cluster,
call these, and apply what they return.
"""
