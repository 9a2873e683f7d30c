"""Arms of many workers behind SGLang's model gateway (smg): evalgate starts N workers and one smg
per arm (``GatewayEngine``), or attaches to a gateway that is already running (attach mode reads
its workers), routes every item by its key, and refuses an arm whose workers answer differently
(``GatewayScorer``). smg's endpoints and flags: ``_smg``."""

from evalgate.engines.gateway._engine import GatewayEngine, GatewayHandle, gateway_policy
from evalgate.engines.gateway._scorer import PROBE_TEXT, GatewayScorer, compare_workers
from evalgate.engines.gateway._smg import (
    ROLES,
    GatewayWorker,
    find_smg,
    gateway_command,
    launch_gateway,
    parse_workers,
    read_workers,
    smg_version,
)

__all__ = [
    "PROBE_TEXT",
    "ROLES",
    "GatewayEngine",
    "GatewayHandle",
    "GatewayScorer",
    "GatewayWorker",
    "compare_workers",
    "find_smg",
    "gateway_command",
    "gateway_policy",
    "launch_gateway",
    "parse_workers",
    "read_workers",
    "smg_version",
]
