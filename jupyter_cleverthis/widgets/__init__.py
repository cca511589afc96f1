"""Notebook widgets for training jobs."""

from .live import JobProgress

__all__ = ["JobProgress"]
