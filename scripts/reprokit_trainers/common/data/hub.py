"""Whether the Hugging Face hub answers, asked once and quickly. Where it does not (an air-gapped
cluster, CI), loaders read what their cache holds at once (``local_files_only``) instead of retrying
every file for half a minute; what the cache holds is the same files the hub would have served."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


def answers(timeout: float = 3.0) -> bool:
    """A TCP connection to the hub's endpoint (HF_ENDPOINT, else huggingface.co) within `timeout`;
    False at once where HF_HUB_OFFLINE says so."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout=timeout).close()
    except OSError:
        return False
    return True
