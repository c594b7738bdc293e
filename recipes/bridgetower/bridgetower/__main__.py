"""`python -m reprokit_trainers.bridgetower`: the trainer's command line (also under torchrun -m and mpirun)."""

from .run_bridgetower import main

if __name__ == "__main__":
    main()
