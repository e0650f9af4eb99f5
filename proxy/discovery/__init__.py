"""Backends discovered from Kubernetes: the pods of an InferencePool's selector, followed by
list + watch and put in force through the policy swap (the policy's ``discovery`` section).
"""

from proxy.discovery.kubeapi import KubeApi, PodList
from proxy.discovery.pods import Pod, backend_for, with_pods
from proxy.discovery.state import DiscoveryError, Gone, PodSet, WatchEvent
from proxy.discovery.watcher import DiscoveredPods, DiscoveryMetrics, PodWatcher, Swap

__all__ = [
    "DiscoveredPods",
    "DiscoveryError",
    "DiscoveryMetrics",
    "Gone",
    "KubeApi",
    "Pod",
    "PodList",
    "PodSet",
    "PodWatcher",
    "Swap",
    "WatchEvent",
    "backend_for",
    "with_pods",
]
