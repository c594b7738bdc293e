"""What measures a step: the step logger, the breakdown of each step's time, stalls, energy, the
machine's other load, device memory, the profiler, and FLOPs and MFU; and samples/s of a run of
transformers' Trainer or GaudiTrainer, fed to the same meter from a callback (hf_trainer.py)."""
