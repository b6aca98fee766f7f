"""kvconnect: KV-cache offload for inference engines, over a C++ core (docs/python.md).

The classes come from the extension module ``kvconnect._kvconnect``; ``kvconnect.vllm`` holds
the vLLM KV connector (imported on its own). Nothing here imports torch or CUDA.
"""
from ._kvconnect import (
    Config,
    ConfigError,
    ConnectorMetadata,
    ConnectorUpdate,
    Error,
    InvalidArgument,
    JobResult,
    RankJobResult,
    SchedulerConnector,
    TierJob,
    Timeout,
    TransferJob,
    WorkerConnector,
    __version__,
    config_sections,
)

__all__ = [
    "Config",
    "ConfigError",
    "ConnectorMetadata",
    "ConnectorUpdate",
    "Error",
    "InvalidArgument",
    "JobResult",
    "RankJobResult",
    "SchedulerConnector",
    "TierJob",
    "Timeout",
    "TransferJob",
    "WorkerConnector",
    "__version__",
    "config_sections",
]
