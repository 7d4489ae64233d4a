"""Solvers of the multi-network problem (several DNNs on one SoC, formulations/mapping/multi)."""
