"""Attach mode: servers that are already running, given as URLs per arm. Nothing is launched; each
server's engine and settings are read back (``_fingerprint``, through each engine package's
``AttachDialect``), an arm's items are sharded across its URLs (``_sharded``), and two spellings of
one server are told apart from two servers (``_urls``). An arm that is one smg gateway is reached
through it, and only the workers it lists on hosts the user allowed are contacted (``_allowed``)."""

from evalgate.engines.attach._engine import AttachedHandle, ExternalEngine
from evalgate.engines.attach._fingerprint import (
    DIALECTS,
    PROTOCOLS,
    api_key_for,
    attached_settings,
    check_attached_pair,
    deployment_changes,
    fingerprint,
    require_attached_pair,
    require_two_instances,
)
from evalgate.engines.attach._sharded import ShardedScorer, preflight_all, shard_index
from evalgate.engines.attach._urls import normalize_url, require_two_servers, server_identity

__all__ = [
    "DIALECTS",
    "PROTOCOLS",
    "AttachedHandle",
    "ExternalEngine",
    "ShardedScorer",
    "api_key_for",
    "attached_settings",
    "check_attached_pair",
    "deployment_changes",
    "fingerprint",
    "normalize_url",
    "preflight_all",
    "require_attached_pair",
    "require_two_instances",
    "require_two_servers",
    "server_identity",
    "shard_index",
]
