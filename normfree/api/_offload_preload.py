"""Imported by the parse workers' forkserver (``api.offload``) before it forks any worker: the
parser, the catalog and each job's first-use costs, taken once so that every worker forked
from it (a replacement after a timeout too) starts warm in milliseconds."""

from normfree.api.offload import exit_with_parent, warm_up

exit_with_parent()  # the server's end, even while the warm-up below still runs
warm_up()
