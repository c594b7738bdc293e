"""`python -m reprokit_trainers.image_classification`: the trainer's command line (also under torchrun -m)."""

from .run_image_classification import main

if __name__ == "__main__":
    main()
