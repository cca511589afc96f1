"""The CleverThis training runtime: the entrypoint of every training job on a Ray cluster.

Importing this package is cheap (no torch): the spec and the event format are shared with the Jupyter side.
"""

__version__ = "0.1.0"
