"""normfree.api (see README: architecture)."""
