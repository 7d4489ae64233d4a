"""Solvers of the rollout-admission problem: online admission policies (simulated), and the
offline planners with known response lengths: CP-SAT's optimum, its large-neighbourhood search
and the just-in-time planner."""

OFFLINE = ("cpsat", "step-plan", "cpsat-lns")   # plan a round knowing every response length: not online policies
