"""The package's version, in a leaf module that any other may import (torch keeps its own in
``torch/version.py``): a module that needs ``__version__`` imports it from here, never from the
package root, so no import runs back up a layer. pyproject.toml reads it for the build."""

__version__ = "0.1.0"
