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
# Readings whose noise std around a smooth function of the loads (what a Bayesian linear fit of their departure
# from the network model's power flow on the loads leaves, models.off_context.reading_noise) is over this (p.u.) at
# any bus scatter like no meter (made-up numbers, the model's voltages plus noise): the service refuses the context
# (service.engine.readings.ScatteredReadings). Legitimate contexts of 16, 64 and 500 rows, each from one truth,
# infer at most 3.5e-3 (SimBench development years 3.1e-3; IEEE 33 with the model right, every line x0.7 or x1.3,
# each line its own 0.7-1.3 factor, at loads +-10 %, grown 1.3-1.6x, 0.3-1.6x, with PV export: 3.5e-3; meter
# noise up to 2e-3, load noise 2 %); this is 5.7x that. The model's voltages plus uniform +-0.05 p.u. infer
# 0.029-0.041 and +-0.19 0.11-0.15, all refused; just below it +-0.02 (0.012-0.016) passes, and +-0.03
# (0.018-0.024) is refused in 30 of 96 contexts (mostly of 16 rows).
#     .venv/bin/python bench/reading_tolerance.py --no-timing   (bench/results/reading-tolerance.md)
READING_SCATTER_PU = 0.02
# A single reading farther than this (p.u.) from what that fit of the other readings predicts at its row (its
# leave-one-out residual), and farther than GLITCH_Z of that distance's stds, is refused as a glitch
# (service.engine.readings.GlitchedReading): one such reading among exact ones is no noise the models take out, and
# they carried it to their answers (IEEE 33, one reading 0.05 p.u. off: physics-fit 0.79x least squares). Legitimate
# contexts put their farthest reading 1.65e-2 p.u. off (IEEE 33 every line x1.3, 0.3-1.6x load, 32 rows, 2/3 of the
# readings missing; SimBench development years 1.08e-2): this is 1.8x that. A regulator mid-feeder 2 taps off on a
# few rows reaches 2.9e-2 (service.engine.readings.GLITCH_Z says where). A glitch under it is kept.
READING_GLITCH_PU = 0.03
