"""The ``pipeplan`` command line: the top layer, above studies, bench and report."""
from pipeplan.app.cli.main import app, main

__all__ = ["app", "main"]
