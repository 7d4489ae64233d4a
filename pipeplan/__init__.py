"""pipeplan: a planning engine for pipelined ML work (see README.md)."""
from pipeplan.core.api import solve
from pipeplan.core.result import Quality, SolveResult, Termination

__all__ = ["solve", "SolveResult", "Termination", "Quality"]
__version__ = "0.1.0"
