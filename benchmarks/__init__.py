"""The kit's benchmarks: `make bench` and `make bench-gpu` run `python -m benchmarks.run`."""
