"""Helpers the lab's benchmark scripts share (standard library only)."""

import time


def wait_for(what, timeout=60, period=0.05):
    """Polls what() every period seconds until it is true (True) or timeout passes (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if what():
            return True
        time.sleep(period)
    return False
