"""ViT-base-patch16-224-in21k fine-tuned on CIFAR-10 with optimum-habana's image-classification example: see README.md beside this file."""
