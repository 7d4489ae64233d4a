"""Where the shipped instance and platform files lie (inside the installed package)."""
from __future__ import annotations

from pathlib import Path

INSTANCES_DIR = Path(__file__).parent
PLATFORMS_DIR = INSTANCES_DIR.parent / "profiles" / "platforms"
