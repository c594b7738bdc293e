"""BridgeTower contrastive fine-tuning on New Yorker cartoons (Hugging Face + Habana, 2023): see README.md beside this file."""
