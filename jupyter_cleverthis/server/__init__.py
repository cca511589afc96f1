"""The Jupyter server extension: an authenticated REST control plane over the job service."""
