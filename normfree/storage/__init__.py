"""normfree.storage (see README: architecture)."""
