"""The trainer process: its command line, its process group, TF32, where it waits for the device, and
what it does first and last (lifecycle.py), and on a Gaudi: is there one, and its Gaudi config (gaudi.py)."""
