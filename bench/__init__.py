"""cronoq's benchmarks: cronoq beside bare Jobs on the local test cluster (see run.py)."""
