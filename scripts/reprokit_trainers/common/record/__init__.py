"""What records the run: the run-directory contract and its writer, the software that ran, the
hardware, MLPerf's log lines and TensorBoard's hyperparameters."""
