"""normfree.kernels (see README: architecture)."""
