"""Fleet acceptance (`inv accept`): the same cell on every node of a partition (one Slurm job per node,
at once) or on each device of this machine alone, each node judged against the publication and its
siblings, for people (a table, a page) and machines (JSON, JUnit XML, drain commands)."""
