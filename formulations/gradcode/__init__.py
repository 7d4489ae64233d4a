"""Pipelined gradient coding (Su and Li, arXiv 2607.20739; foundations: Tandon et al., ICML 2017).

Problem data (``problem``, ``straggler``), codes (``gradient_code``), the feasibility checker,
decoders, the decodability verifier, the virtual-time simulator and the evaluator. Solvers that
build codes live in ``pipeplan.solvers.gradcode``; training runtimes in ``pipeplan.deploy.gradcode``.
"""
