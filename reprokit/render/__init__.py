"""Render: text made from templates, the Dockerfiles and the run scripts (run.sh, sbatch.sh), with
every value written into a shell file made safe there. Imports only the contract and the plan."""
