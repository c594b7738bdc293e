"""What a bare node's first minute establishes: the software that will run, the device, its measured
matmul peak and NVML's energy counter (``python -m reprokit_trainers.devicecheck``)."""
