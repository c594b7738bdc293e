"""`python -m reprokit_trainers.vit`: the trainer's command line (also under torchrun -m and mpirun)."""

from .run_vit import main

if __name__ == "__main__":
    main()
