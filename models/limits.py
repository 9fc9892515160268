"""The context sizes the models serve, in a module without torch: the service's settings read the
largest as their default limit (GRIDPFN_MAX_CONTEXT_ROWS) without importing the models."""

from __future__ import annotations

# Below this the physics base's leave-one-out choice between the linear and the physics fit is noise.
MIN_CONTEXT_ROWS = 16
# At this size the physics base's fit is one (10,000 x ~200) SVD and the attention sees a fixed
# subset of the rows (models.model.ATTEND_MAX).
MAX_CONTEXT_ROWS = 10_000
