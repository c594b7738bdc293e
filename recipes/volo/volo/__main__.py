"""`python -m reprokit_trainers.volo`: the trainer's command line (also under torchrun -m and mpirun)."""

from .run_volo import main

if __name__ == "__main__":
    main()
