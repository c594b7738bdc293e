"""reprokit: rerun published accelerator training benchmarks in pinned containers.

The host side of the kit. It never imports torch: the trainers in ``reprokit_trainers/`` do, and the two
sides meet only in the run directory.
"""

__version__ = "0.1.0"
# The distribution's name, installed from a checkout or a wheel (it is not on the package index, whose
# `reprokit` is another project); the command and package are `reprokit`.
DISTRIBUTION = "reprokit-bench"
