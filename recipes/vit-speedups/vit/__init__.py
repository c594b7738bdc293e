"""pycls's ViT with each rung of Meta's speedup ladder (Meta AI, 2022): see README.md beside this file."""
