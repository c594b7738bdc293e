"""Plan: from recipes and the user's request to the cells a session runs.

recipes.py (load and validate recipes/*.yaml) -> cells.py (expand a recipe's variants for one
accelerator and scale, with each trainer's argument schema checked: arguments.py) ; accelerators.py
(profiles and base manifests, docker/*.yaml) ; data.py (the user's --data) ; planner.py (the plan, in the runtime and
container platform run/placement.py chooses). What a throughput figure counts: contract/definitions.py.
"""
