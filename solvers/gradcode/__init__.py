"""Gradient-code constructions (FR, CR, pipelined PGC-FR / PGC-CR, baselines) and the
assignment solvers (CP-SAT, MILP) for heterogeneous workers."""
