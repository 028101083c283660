"""A server freezes its long-lived heap after the warm-up; a test process (many apps) does not."""

from __future__ import annotations

import gc

from normfree.api import services


def test_freeze_long_lived_only_in_a_server() -> None:
    gc.unfreeze()
    try:
        services.FREEZE_HEAP.clear()
        services.freeze_long_lived()
        assert gc.get_freeze_count() == 0  # apps built by tests never freeze the process

        services.FREEZE_HEAP.set()
        kept = [object() for _ in range(1000)]  # long-lived objects of a "server"
        services.freeze_long_lived()
        frozen = gc.get_freeze_count()
        assert frozen >= len(kept)
        # a full collection no longer walks the frozen heap
        assert len(gc.get_objects()) < frozen
    finally:
        services.FREEZE_HEAP.clear()
        gc.unfreeze()
