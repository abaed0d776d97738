"""Signal-to-stop: SIGTERM (the kubelet, ``helm uninstall``) and SIGINT (a terminal) end a command the same way."""

from __future__ import annotations

import asyncio
import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_event() -> asyncio.Event:
    """An event set when the process is asked to stop; call from inside the running event loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    return stop
