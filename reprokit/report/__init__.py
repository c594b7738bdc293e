"""Report: the collected rows shown: report.md and report.html with their plots, the terminal table,
history over sessions, compare of two sessions, and the export to MLflow."""
