"""The one reader of the environment.

Every knob that may differ between a laptop, CI and a cluster lives here, read from variables
prefixed ``NORMFREE_`` (plus ``CI``, which decides whether a test that needs a server may skip).
Nothing else in normfree calls ``os.environ``; code takes a ``Settings`` or calls
:func:`get_settings`. One exception, for speed: :mod:`normfree.quick_settings` reads three of
these same variables (``kernel_cache``, ``checker``, ``checker_timeout_seconds``) for the quick
CLI commands without importing pydantic, and defers to this class for any value it does not
parse exactly as this class would.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Service configuration. Defaults are the embedded single-machine setup."""

    model_config = SettingsConfigDict(env_prefix="NORMFREE_", extra="ignore", populate_by_name=True)

    # Storage: SQLite in the working directory by default; a PostgreSQL URL at scale.
    database_url: str = "sqlite:///normfree.db"
    # Optuna's RDB storage; unset means "beside ours" (derived from database_url by storage).
    optuna_storage_url: str | None = None

    # Ray: unset starts an embedded local cluster on demand; an address joins an existing one.
    ray_address: str | None = None
    # Ray Jobs API of a cluster (http://head:8265): set, studies are submitted there as Ray jobs
    # (one per study, idempotent by id) so the API process never drives long studies itself.
    ray_jobs_address: str | None = None
    # Share the embedded cluster on this host: ``normfree serve`` starts its local Ray at once
    # and advertises it (workers.localray.advertise), and a study command with no ray_address
    # joins it instead of starting its own (seconds saved per small study). Off: every process
    # starts its own cluster on demand.
    share_local_cluster: bool = True
    # Cap for the embedded object store: Ray's default (30% of memory) is far beyond trials' needs.
    ray_object_store_bytes: int = 200 * 1024 * 1024
    trial_cpus: float = 1.0
    trial_gpus: float = 0.0
    # torch threads inside one trial: on 2 cores two one-thread trials beat one two-thread trial.
    trial_threads: int = 1
    # Where a trial trains: "auto" = CUDA when the trial was given a GPU (trial_gpus > 0) and one
    # is visible (there the Triton kernels run), else CPU; "cpu"/"cuda" force it.
    trial_device: Literal["auto", "cpu", "cuda"] = "auto"

    # Leases: a RUNNING trial whose lease is not renewed for this long is considered lost.
    lease_seconds: float = 60.0
    max_attempts: int = 3

    # Generated Triton/torch kernels are written here, keyed by canonical form and dtype.
    kernel_cache: Path = Path.home() / ".cache" / "normfree" / "kernels"
    # What backend="auto" runs on CPU tensors: "native" (generated C built by the C compiler
    # below, ~0.5 s once per candidate and machine, the fastest), "torch" (generated torch code,
    # eager: no compiler needed) or "compile" (the torch code fused by torch.compile: ~10-20 s to
    # compile per candidate and process). See README: kernels.
    kernel_cpu_backend: Literal["native", "torch", "compile"] = "native"
    # C compiler of the native CPU path (gcc or clang; a missing one falls back to "torch").
    kernel_cc: str = "cc"
    # The only place studies read user datasets from: <root>/<name>.npz or <root>/<name>/ (one
    # sub-folder per class), chosen by name; paths outside it are refused (README: security).
    data_root: Path = Field(
        default=Path("data"),
        validation_alias=AliasChoices("NORMFREE_DATA_ROOT", "NORMFREE_DATA_DIR", "data_root"),
    )

    # API
    public_reads: bool = True
    host: str = "127.0.0.1"
    port: int = 8000
    max_request_bytes: int = 64 * 1024
    # Threads per server process for the API's blocking work (database reads, building a read
    # that is not cached). Few on purpose: on a small machine 40 threads (anyio's default)
    # contend for the GIL and outnumber the connection pool, so each request pays for pool
    # churn (bench/results/read_scale.md). The pool is sized to hold them all.
    api_threads: int = Field(default=8, ge=1, le=128)
    # Threads for the API's *short* blocking work (a known function's submission with its token
    # check; a small read on a server database), apart from the builds above so that it never
    # waits behind one. Two: the work holds the GIL, and at 32 clients a known function's
    # submission answered p99 280 ms over 8 threads, 115 ms over 2 (GIL hand-offs between
    # runnable threads, bench/results/read_scale.md).
    quick_threads: int = Field(default=2, ge=1, le=32)
    # Threads for a key's small read on a *server* database (PostgreSQL), apart from the short
    # CPU work above: such a read holds its thread through a round trip to another process,
    # not the GIL, so two threads queued 32 readers behind one another's round trips (p50
    # 250 ms at 10k trials under a writer; 8 threads: 34 ms, 16: no better; AMD EPYC,
    # bench/results/live_reads.md). Also the size of the async pool of trial documents. The
    # connection pool (``storage.db``) holds these and the API's threads.
    server_read_threads: int = Field(default=8, ge=1, le=32)
    # Replay cached anonymous reads before routing while the database is unchanged
    # (api.fastlane). Off: every read goes through its route (to compare, or to rule it out).
    fast_lane: bool = True
    # A cached read whose version changed less than this long ago is under a stream of writes:
    # the reader of its next version waits at most ``read_fresh_wait_s`` for the build, then gets
    # the previous version (api.cache). 0: every such reader waits for the build. The test
    # suite, which reads its own writes back at once, sets 0.
    read_stale_window_s: float = Field(default=2.0, ge=0, le=600)
    read_fresh_wait_s: float = Field(default=0.02, ge=0, le=600)
    # A server process's rebuilds of reads under a stream of writes (the families above) run in
    # a builder process that answers with the encoded body (api.builder): the serving process's
    # event loop then has its GIL to itself. Off: they run on the server's rebuild thread.
    read_builder: bool = True
    # How often a server process's threads hand the GIL over (``sys.setswitchinterval``; Python's
    # default is 5 ms). Under a writer the read builds hold the GIL, and the event loop, which
    # gives it up at every socket call, waited up to a whole interval each time it wanted it
    # back: 0.5 ms halved the live reads' p50 at 10k trials and left the still reads'
    # throughput as it was (bench/results/live_reads.md). Set in server processes only.
    gil_switch_interval_s: float = Field(default=0.0005, ge=1e-5, le=1.0)
    # How long a board's (or study page's) build waits for its fidelity line of the current
    # version before it shows the latest one computed (api.lines): the line is a report over
    # every finished trial, computed once per version on a background thread, and a board
    # must not wait for it under a writer (issue 27). The test suite waits long (exact lines).
    fidelity_line_wait_s: float = Field(default=0.25, ge=0, le=600)
    # The same wait when an older line is done (a write moved the board): none by default, the
    # older line is shown and the board is built again when the new one is done.
    fidelity_line_rewait_s: float = Field(default=0.0, ge=0, le=600)
    # A board's next fidelity line starts no sooner than this many times the last one's cost after
    # it (api.lines): a writer's stream of commits then leaves the GIL mostly to the reads. The
    # test suite, which waits for exact lines after each change, sets 0 (no spacing).
    fidelity_line_spacing: float = Field(default=9.0, ge=0, le=100)
    # A study's estimated cost (trials x epochs x the preset's per-epoch seconds, scaled by model
    # size overrides) must stay under this many trial-seconds, or creation answers 422.
    max_study_trial_seconds: float = Field(default=250_000.0, gt=0)
    # `candidates check` hands a formula it has not checked before to a long-lived local checker
    # process (search_space.checker), started on first use: on the AMD EPYC a first check's
    # imports alone (sympy 0.27-0.55 s) take 0.6-1.3 s of CPU, over the command's 0.5 s budget.
    # Off: every check runs in the CLI's own process.
    checker: bool = True
    # The checker exits after this many seconds without a request.
    checker_idle_seconds: float = Field(default=600.0, gt=0)
    # A CLI waits this long for the checker's answer, then checks in its own process.
    checker_timeout_seconds: float = Field(default=60.0, gt=0)
    # Expensive anonymous reads (a formula parsed on GET) allowed per client and minute; token
    # holders are not limited. 0 turns the limit off.
    anonymous_parses_per_minute: int = Field(default=30, ge=0)
    # Proxies whose X-Forwarded-For names the client (addresses or CIDR networks, comma
    # separated). Empty (the default): the peer address is the client, and X-Forwarded-For is
    # ignored whoever sends it; uvicorn is started with proxy headers off (api.security).
    trusted_proxies: str = ""
    # Formula parses, reference imports and study checks run in this many worker processes
    # (api.offload): sympy holds the GIL, so threads would stall every other request.
    offload_workers: int = Field(default=2, ge=1, le=32)
    # One such job may use this much CPU time (its worker runs only when a core would idle, so
    # waiting for one is not counted); more is refused (422) and its worker replaced.
    offload_seconds: float = Field(default=15.0, gt=0, le=600)
    # A study's check and its plan: every cell's function resolved (seconds of sympy per new
    # formula) and up to 2,000 trials written, so a whole study gets longer than one formula.
    offload_study_seconds: float = Field(default=120.0, gt=0, le=600)
    # Jobs one client may have queued or running at once; more answer 429.
    offload_queue_per_client: int = Field(default=4, ge=1, le=1000)
    # Trial-seconds one token may have in studies not yet finished (their estimates, less the
    # trials already done); a study that would exceed it answers 429 with Retry-After.
    max_token_trial_seconds: float = Field(default=500_000.0, gt=0)

    # PostgreSQL server used by the test suite (a database is created and dropped per run).
    test_postgres_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"

    # CI=true turns "skip: server unreachable" into a failure.
    ci: bool = Field(default=False, validation_alias=AliasChoices("CI", "NORMFREE_CI"))

    # Triton's CPU interpreter (tests). Read here, exported to the process before kernels load.
    triton_interpret: bool = Field(
        default=False,
        validation_alias=AliasChoices("TRITON_INTERPRET", "NORMFREE_TRITON_INTERPRET"),
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _check_proxies(cls, value: str) -> str:
        """Each comma-separated part must be an address or a network (a typo is an error at
        start, not a proxy silently untrusted)."""
        for part in filter(None, (p.strip() for p in value.split(","))):
            try:
                ipaddress.ip_network(part, strict=False)
            except ValueError:
                raise ValueError(
                    f"trusted_proxies: {part!r} is not an address or network"
                ) from None
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once. Tests build their own ``Settings(...)`` instead."""
    return Settings()
