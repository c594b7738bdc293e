"""The container side of reprokit: one trainer per published benchmark, and what they share.

Each trainer is a folder with its script, its helpers and a README giving the published command and
every departure from it; it runs as ``python -m reprokit_trainers.<name> --output_dir DIR ...``
(also under ``torchrun ... -m`` and ``mpirun ... python -m``). What the trainers share, and only
that, lives in ``reprokit_trainers.common``.

This package imports torch, transformers and timm, and never imports the host package ``reprokit``:
the two sides meet only in the run directory (README, "The run directory").
"""
