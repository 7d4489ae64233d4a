"""Solvers of the rollout-admission problem: online admission policies (simulated) and the
offline CP-SAT optimum with known response lengths."""
