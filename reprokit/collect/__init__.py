"""Collect: a session's run directories read back into results.csv and results.jsonl (each row
judged as it is written), why each number is what it is, the machines and their MLPerf system
descriptions, and the results folder's sessions read in place."""
