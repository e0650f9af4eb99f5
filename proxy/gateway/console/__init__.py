"""The operator's console (``/ui``): fleet, traffic, verification, canary and policy views."""

from proxy.gateway.console.recent import RecentRequest, RecentRequests
from proxy.gateway.console.routes import console_router, install_console

__all__ = ["RecentRequest", "RecentRequests", "console_router", "install_console"]
