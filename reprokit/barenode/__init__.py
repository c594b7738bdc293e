"""Running the kit on a bare, air-gapped GPU node: the bundle of wheels it lacks (wheels.py), the
slices of cells an attempt runs (slices.py), the CPU rehearsal of every cell before any GPU time is
spent (rehearsal.py), and the runner that runs a slice there and packs what comes back (runner.py,
archive.py). README.md, "On a bare GPU node", is the user's guide."""
