"""The package is typed (``py.typed``): ``mypy --strict`` over it stays clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_mypy_strict_is_clean() -> None:
    package = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental"], cwd=package, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
