"""The routing policy: its schema (one pydantic model per section), loading and hot reload.

``proxy.policy.manager`` holds the reload machinery (file watch, admin PUT, rollback).
"""

from proxy.policy.canary import CanaryConfig
from proxy.policy.classifier import ClassifierConfig, ClassRule
from proxy.policy.latency import LatencySettings, Objective, OverloadSettings, SloSettings
from proxy.policy.schema import (
    AcceptanceSettings,
    BackendSpec,
    BreakEven,
    PluginSpec,
    Policy,
    PolicyError,
    PoolSpec,
    RoutingProfile,
    SpecMethod,
    Speculation,
    StoreSpec,
    load_policy,
    parse_policy,
)
from proxy.policy.shadow import ShadowConfig

__all__ = [
    "AcceptanceSettings",
    "BackendSpec",
    "BreakEven",
    "CanaryConfig",
    "ClassRule",
    "ClassifierConfig",
    "LatencySettings",
    "Objective",
    "OverloadSettings",
    "PluginSpec",
    "Policy",
    "PolicyError",
    "PoolSpec",
    "RoutingProfile",
    "ShadowConfig",
    "SloSettings",
    "SpecMethod",
    "Speculation",
    "StoreSpec",
    "load_policy",
    "parse_policy",
]
