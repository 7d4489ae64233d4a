"""Studies: solver comparisons and experiments of each system (mapping, gradcode, rollout)
and the deploy loop, side by side. Each plans through ``pipeplan.solve``."""
