"""VOLO training with token labeling (sail-sg/volo; NVIDIA + Sea AI Lab, 2022): see README.md beside this file."""
