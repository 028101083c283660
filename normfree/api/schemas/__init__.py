"""The API's request and response models: separate families from the ORM rows.

``*Create`` models are what a client may send (``extra="forbid"``, every size bounded, so a hostile
body is a 422 with the field named, not a huge study or a 500). ``*Public`` models are what the
API answers; they are built by :mod:`normfree.api.services` from storage rows and never expose
internals (lease owners, token hashes). Bounds here are API policy, not science: they keep one
request within seconds and one study within a machine-day.

One module per resource; this package re-exports every model (and the bases ``_In``/``_Out``),
so ``from normfree.api import schemas as S; S.StudyDetail`` reaches any of them by name.
"""

# The bases are re-exported too: models outside this package (compare, search) derive from _Out.
from normfree.api.schemas._base import NAME_PATTERN, _In, _Out  # noqa: F401
from normfree.api.schemas.candidates import (
    CandidateCreate,
    CandidateList,
    CandidatePublic,
    CandidateSubmitted,
    PlotData,
    PrescreenPublic,
)
from normfree.api.schemas.health import Health, Version
from normfree.api.schemas.leaderboards import (
    ArmFailure,
    BoardCaveats,
    FidelitySummary,
    LeaderboardPublic,
    LeaderboardRow,
    ReliabilityPublic,
)
from normfree.api.schemas.references import (
    FidelityReport,
    ReferenceSetDeleted,
    ReferenceSetDetail,
    ReferenceSetList,
    ReferenceSetPublic,
)
from normfree.api.schemas.screens import ScreenCreate, ScreenOne, ScreenPublic
from normfree.api.schemas.studies import (
    ArchiveState,
    ArmList,
    BestArm,
    Removal,
    StudyCell,
    StudyCreate,
    StudyDeleted,
    StudyDetail,
    StudyList,
    StudyPatch,
    StudyProgress,
    StudyPublic,
    TrialPage,
    TrialSummary,
)
from normfree.api.schemas.trials import CurvePoint, LayerDiagnosticPublic, TrialPublic

__all__ = [
    "NAME_PATTERN",
    "ArchiveState",
    "ArmFailure",
    "ArmList",
    "BestArm",
    "BoardCaveats",
    "CandidateCreate",
    "CandidateList",
    "CandidatePublic",
    "CandidateSubmitted",
    "CurvePoint",
    "FidelityReport",
    "FidelitySummary",
    "Health",
    "LayerDiagnosticPublic",
    "LeaderboardPublic",
    "LeaderboardRow",
    "PlotData",
    "PrescreenPublic",
    "ReferenceSetDeleted",
    "ReferenceSetDetail",
    "ReferenceSetList",
    "ReferenceSetPublic",
    "ReliabilityPublic",
    "Removal",
    "ScreenCreate",
    "ScreenOne",
    "ScreenPublic",
    "StudyCell",
    "StudyCreate",
    "StudyDeleted",
    "StudyDetail",
    "StudyList",
    "StudyPatch",
    "StudyProgress",
    "StudyPublic",
    "TrialPage",
    "TrialPublic",
    "TrialSummary",
    "Version",
]
