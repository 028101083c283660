"""normfree.workers (see README: architecture)."""
