"""The context sizes the models serve, in a module without torch: the service's settings read the
largest as their default limit (GRIDPFN_MAX_CONTEXT_ROWS) without importing the models."""

from __future__ import annotations

# Below this the physics base's leave-one-out choice between the linear and the physics fit is noise.
MIN_CONTEXT_ROWS = 16
# At this size the physics base's fit is one (10,000 x ~200) SVD and the attention sees a fixed
# subset of the rows (models.model.ATTEND_MAX).
MAX_CONTEXT_ROWS = 10_000
# A voltage reading (|V| p.u.) outside this range is no operating point of a distribution feeder: a reading
# in kV or V, a meter's placeholder, a collapsed feeder. The models extrapolate such a reading into nonsense
# (a reading of 2.0 gave a checkpoint a negative 5 % quantile), so the service refuses it by cell instead.
READING_MIN_PU, READING_MAX_PU = 0.5, 1.5
# A reading this far (p.u.) from the network model's power flow at its row's loads is no measurement of that
# feeder (a swapped column, another feeder's data, made-up numbers): the service refuses it by cell
# (service.engine.readings). Legitimate readings lie within 0.060 of it (bench/reading_tolerance.py: SimBench
# years, meter noise 2e-3, load noise 2 %, IEEE 33 with every line 0.7-1.3x the model at loads up to 1.6x, PV
# export); this leaves 3.3x that, and room for an unmodelled tap or regulator of a few percent.
READING_TOLERANCE_PU = 0.2
