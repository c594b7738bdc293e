"""What feeds the model: ImageNet folders and loaders, synthetic data of the real shapes, RandAugment,
GPU decoding, the side-stream prefetcher, and the hub's answers and caches."""
