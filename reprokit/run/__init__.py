"""Run: the cells of a plan, one after another, each into its run directory.

session.py (the session folder and its session.json) ; supervise.py (the one supervision loop) ;
runtimes/ (where a cell runs: local, slurm) x containers/ (what it runs in: none, docker, pyxis,
apptainer) ; images/ (the Docker images: build context, tag, build, wheelhouse, export) ;
rundirs.py (the host's half of the run-directory contract) ; reproduce.py (plan -> run -> results).
"""
