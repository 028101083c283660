"""Imported by the parse workers' forkserver (``api.offload``) before it forks any worker: the
parser, the catalog and each job's first-use costs, taken once so that every worker forked
from it (a replacement after a timeout too) starts warm in milliseconds."""

from normfree.api.offload import warm_up

warm_up()
