"""The kernel every system stands on: errors, results, the solver registry and the solve
facade, checked file input and output, the deadline clock, size caps, the shared vocabulary."""
