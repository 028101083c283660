"""The drills of the two registry extensions: a proxy preset and a study kind.

Same form as ``drills.py`` (one :class:`~tests.extend.drills.Drill` each, made in a scratch copy
by editing exactly the files the doc's section lists); a kind's module is a new file, named in
the doc as ``<kind>``.
"""

from __future__ import annotations

from tests.extend.drills import Drill, suite_of

# -- a preset: a deeper smoke ViT, keeping its parent's measured cost -------------------------
PRESET_CODE = """register(
    replace(
        PROXIES["vit-tiny"],
        name="vit-tiny-deep",
        config=replace(PROXIES["vit-tiny"].config, depth=4),
        description="Smoke-test ViT at depth 4 (the preset drill).",
    )
)

"""

# costed from its parent's measurement by FLOPs (twice the blocks: twice the seconds), not by
# a fallback; a request names it; a trial trains on it; the prescreen runs it
PRESET_SCRIPT = """
import math
from normfree.specs import NormSpec, StudySpec, TrialConfig
from normfree.workers.cost import check_study, trial_seconds
from normfree.workers.prescreen import prescreen
from normfree.workers.proxies import PROXIES
from normfree.workers.trainer import train_trial
deep, tiny = PROXIES["vit-tiny-deep"], PROXIES["vit-tiny"]
one = lambda p: trial_seconds(TrialConfig(proxy=p, norm=NormSpec(name="erf"), seed=0))
assert abs(one("vit-tiny-deep") - 2 * one("vit-tiny")) < 1e-9, one("vit-tiny-deep")
spec = StudySpec(kind="options", proxy="vit-tiny-deep", functions=["erf"], seeds=1,
                 options={"alpha0": [0.5]})
assert check_study(spec).trials == 1
assert prescreen("erf", proxy="vit-tiny-deep")["steps"] == deep.prescreen.steps
cfg = TrialConfig(proxy="vit-tiny-deep", norm=NormSpec(name="erf"), seed=0, epochs=1)
result = train_trial(cfg)
assert result.status == "complete" and math.isfinite(result.metrics["train_loss"]), result
print("preset drill ok")
"""

PRESET = Drill.inserting(
    "A proxy preset", "normfree/workers/proxies/__init__.py",
    "# The screens a user gets without naming one", PRESET_CODE,
    checks=(
        ("-c", PRESET_SCRIPT),
        suite_of("vit-tiny-deep", "vit-tiny-deep or every_preset",
                 "tests/workers/test_proxies.py", "tests/workers/test_preset_cost.py"),
    ),
)  # fmt: skip


# -- a study kind: every function at its defaults x paired seeds ------------------------------
KIND_MODULE = '''"""``sweep``: every function at its defaults x paired seeds (the kind drill)."""

from __future__ import annotations

from normfree.specs import StudySpec
from normfree.workers.kinds.base import StudyKind, needs_functions
from normfree.workers.scheduling import PlannedTrial, norm_spec, plan_cells


class SweepKind(StudyKind):
    name = "sweep"
    summary = "every function at its defaults x paired seeds"
    grid = True

    def smoke_spec(self, proxy: str) -> StudySpec:
        return StudySpec(
            kind=self.name, proxy=proxy, seeds=1, functions=["erf"], baselines=["layernorm"],
            epochs=1,
        )

    def problems(self, spec: StudySpec) -> list[str]:
        return needs_functions(spec)

    def plan(self, spec: StudySpec) -> list[PlannedTrial]:
        self.validate(spec)
        cells = [(norm_spec(fn, spec), {}, {"function": fn}, "cell") for fn in spec.functions]
        return plan_cells(spec, cells, [{}])
'''

# the spec, the API's schema, the CLI's list and its generic command know the kind by its module
KIND_SCRIPT = """
import json, pathlib, tempfile
from click.testing import CliRunner
from normfree.api.schemas import StudyCreate
from normfree.cli import main
from normfree.specs import StudySpec
StudySpec(kind="sweep", proxy="vit-tiny", functions=["erf"])
assert "sweep" in StudyCreate.model_json_schema()["properties"]["kind"]["enum"]
runner = CliRunner()
listed = runner.invoke(main, ["study", "kinds", "--json"])
assert listed.exit_code == 0 and "sweep" in {r["kind"] for r in json.loads(listed.output)}, listed
db = pathlib.Path(tempfile.mkdtemp()) / "nf.db"
made = runner.invoke(main, [
    "study", "new", "sweep", "--functions", "erf,tanh", "--proxy", "vit-tiny", "--seeds", "2",
    "--epochs", "1", "--detach", "--db", f"sqlite:///{db}", "--json",
])
assert made.exit_code == 0, made.output
assert json.loads(made.output)["trials"] == 6, made.output  # (2 functions + layernorm) x 2 seeds
print("kind drill ok")
"""

KIND = Drill(
    section="A study kind",
    edits={"normfree/workers/kinds/sweep.py": lambda _: KIND_MODULE},
    checks=(
        ("-c", KIND_SCRIPT),
        suite_of("sweep", "sweep or registered", "tests/workers/test_kind_contract.py",
                 "tests/workers/test_kinds.py"),
    ),
    placeholders=(("<kind>", "sweep"),),
)  # fmt: skip

REGISTRY_DRILLS: tuple[Drill, ...] = (PRESET, KIND)
