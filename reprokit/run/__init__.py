"""Run: the cells of a plan, one after another, each into its run directory.

placement.py (the runtime and container platform chosen, the plan made with them) ; plugins.py
(the registries and their entry points) ; session.py (a new session folder, its session.json; a
resume) ; supervise.py (the one supervision loop) ; plugin_options.py (the runtime and container
platform given the options each declares) ; supervisor_file.py (supervisor.json: who runs a cell) ;
runtimes/ (where a cell runs: local, slurm) x containers/ (what it runs in: none, docker, pyxis,
apptainer) ; machinelock.py (one session measures on a machine at a time). The images are built by
reprokit/images/, the run scripts rendered by reprokit/render/. The run-directory and session files'
names and readers are in contract/; plan -> run -> collect -> report is reprokit/pipeline.py.
"""
