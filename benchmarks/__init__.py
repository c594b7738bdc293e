"""The kit's benchmarks: `make bench` and `make bench-gpu` run `python benchmarks/run.py`."""
