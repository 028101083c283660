"""The API's request and response models: separate families from the ORM rows.

``*Create`` models are what a client may send (``extra="forbid"``, every size bounded, so a hostile
body is a 422 with the field named, not a huge study or a 500). ``*Public`` models are what the
API answers; they are built by :mod:`normfree.api.services` from storage rows and never expose
internals (lease owners, token hashes). Bounds here are API policy, not science: they keep one
request within seconds and one study within a machine-day.

One module per resource; this package re-exports every model (each module's ``__all__``) and
the bases ``_In``/``_Out``, so ``from normfree.api import schemas as S; S.StudyDetail`` reaches
any of them by name.
"""

# The bases are re-exported too: models outside this package (compare, search) derive from _Out.
from normfree.api.schemas._base import NAME_PATTERN as NAME_PATTERN
from normfree.api.schemas._base import _In as _In
from normfree.api.schemas._base import _Out as _Out
from normfree.api.schemas.candidates import *  # noqa: F403
from normfree.api.schemas.health import *  # noqa: F403
from normfree.api.schemas.leaderboards import *  # noqa: F403
from normfree.api.schemas.references import *  # noqa: F403
from normfree.api.schemas.screens import *  # noqa: F403
from normfree.api.schemas.studies import *  # noqa: F403
from normfree.api.schemas.trials import *  # noqa: F403
