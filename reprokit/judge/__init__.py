"""Judge: the rules that put a measured number beside its published one (verdicts), the ratios
between a session's rows, a cell's repeats as one row, and the result row that carries them. The
rules stand under collect/, which judges each row as it writes it (results.csv carries verdicts)."""
