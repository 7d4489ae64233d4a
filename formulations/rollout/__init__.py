"""Rollout admission in on-policy LLM RL (RolloutPipe, arXiv 2606.26997): problem data,
workloads, the discrete-event simulator (the one evaluator), its checker and lower bounds."""
