"""Results: run directories read back, judged, and shown.

contract/records.py (typed run-directory records) -> verdicts.py (measured beside published: definitions,
departures, verdicts) -> row.py (the result row, results.csv's columns) -> collect.py (results.csv /
results.jsonl, with repeats.py: repetitions of a cell, and ratios.py: speedups, scaling efficiency)
-> report.py, plots.py, pages.py, explain.py, stacks.py (report.md, report.html), terminal.py ;
store.py, history.py, compare.py (sessions over time) ; export_mlflow.py.
"""
