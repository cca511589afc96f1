"""The CleverThis training runtime: the entrypoint of every training job on a Ray cluster.

Importing this package is cheap (no torch): the spec and the event format are shared with the Jupyter side.
"""

try:  # written by the build (hatch's version hook, from js/package.json)
    from ._version import __version__
except ImportError:  # a source tree that was never built or installed
    __version__ = "0+unknown"
