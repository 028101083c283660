"""Column types the revisions share, defined once.

Frozen like the revisions themselves: changing a type here would change what an old revision
creates, so a new type gets a new name. They match ``models.JSONType`` and the models'
timezone-aware timestamps at the time of writing; the revisions do not import the models, which
move on.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

# JSONB on PostgreSQL (indexable, compact), plain JSON text elsewhere.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.DateTime(timezone=True)
