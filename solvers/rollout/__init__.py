"""Solvers of the rollout-admission problem: online admission policies (simulated), and the
offline planners with known response lengths: CP-SAT's optimum and the just-in-time planner."""

OFFLINE = ("cpsat", "step-plan")   # plan a round knowing every response length: not online policies
