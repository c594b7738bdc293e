"""What every trainer shares, in four groups a trainer's ``main`` reads as its steps:

- ``process``: the trainer process itself: its command line (args, argschema), its process group
  (distributed), TF32 (precision), where the host waits for the device (streams), whether it runs on
  a Gaudi and with which Gaudi config (gaudi), and what every trainer does first and last (lifecycle: notices, the accelerator check, TF32 as asked; the summary
  and leaving the process group);
- ``data``: what feeds the model: ImageNet folders and their loaders, synthetic data of the real
  shapes, RandAugment on tensors, GPU decoding, the side-stream prefetcher, the hub and its caches;
- ``measure``: what measures a step: the step logger (or, for transformers' Trainer, its callback:
  hf_trainer), where the time went (breakdown), stalls, energy, what else used the machine, device memory, the profiler, FLOPs and MFU;
- ``record``: what records the run: the run-directory contract, the run directory's writer, the
  software that ran, the hardware, MLPerf's log lines and TensorBoard's hyperparameters.
"""
