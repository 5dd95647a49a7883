import os
import sys

try:  # the package may not be installed in the venv yet
    import gtsamples.format.constants  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src")))
