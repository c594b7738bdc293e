"""What every trainer shares: the run directory, the process group, the step logger, argument
parsing, FLOP counting and MFU, and the ImageNet and synthetic data sources; and what the explicit
loops do alike before and after training (loop.py)."""
