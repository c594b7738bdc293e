"""What every trainer shares: the run directory, the process group, the step logger, argument
parsing, FLOP counting and MFU, and the ImageNet and synthetic data sources."""
