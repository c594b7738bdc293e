"""Results: run directories read back, judged, and shown.

records.py (typed run-directory records) -> verdicts.py (measured beside published: definitions,
departures, verdicts, speedups) -> collect.py (results.csv / results.jsonl) -> report.py, plots.py,
pages.py (report.md, report.html) ; store.py, history.py, compare.py (sessions over time) ;
export_mlflow.py.
"""
