"""Run: the cells of a plan, one after another, each into its run directory.

placement.py (the runtime and container platform chosen, the plan made with them) ; plugins.py
(the registries and their entry points) ; session.py (a new session folder, its session.json; a
resume) ; supervise.py (the one supervision loop) ;
runtimes/ (where a cell runs: local, slurm) x containers/ (what it runs in: none, docker, pyxis,
apptainer) ; images/ (the Docker images: build context, tag, build, wheelhouse, export) ;
machinelock.py (one session measures on a machine at a time). The run-directory and session files'
names and readers are in contract/; plan -> run -> results is reprokit/pipeline.py.
"""
