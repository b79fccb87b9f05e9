"""Optional dependencies of commands: a clear message, not a traceback, when one is missing."""

from __future__ import annotations

import importlib.util
import sys

TORCH_HINT = ("install PyTorch: pip install 'bertjax[torch]' (on a machine without an NVIDIA GPU, "
              "install the CPU build first: pip install torch --index-url "
              "https://download.pytorch.org/whl/cpu)")


def require_torch(purpose: str) -> bool:
    """True if PyTorch can be imported; otherwise print why `purpose` needs it and how to get it."""
    if importlib.util.find_spec("torch") is not None:
        return True
    print(f"bertjax: error: {purpose}, which needs PyTorch; {TORCH_HINT}", file=sys.stderr)
    return False
