"""The feeder's physics as an in-context base fit: linear in the loads plus DistFlow's squares.

On a radial feeder (DistFlow), the voltage magnitude at bus j is linear in the loads plus a small,
structured second-order term: a weighted sum of squared branch flows P_b^2, Q_b^2, P_b Q_b (each
branch b carries the loads downstream of it) and the square of bus j's own linear voltage drop
(|V| = sqrt(V^2)). A generic quadratic in 64 loads has 2,080 terms that 500 points cannot
identify; this one has 4 per bus and needs the topology, which the context itself gives:

1. A linear ridge fit gives sensitivities S[j, i] = d|V_j| / dP_i, which on a radial feeder equal
   minus the resistance of the common path of buses i and j (likewise with Q and reactance).
2. The tree follows without a tolerance: with R = -S (symmetrised) and depth R[j, j], bus j's
   parent is the shallower bus p maximising 2 R[p, j] - R[p, p]. For the true parent this is
   its depth; for any other bus it is smaller (an ancestor is shallower, a bus off the path
   shares less of it with j). A bus with no positive score hangs off the substation.
3. Features: the standardised loads, the squared, cross and centred branch flows of every bus's
   upstream branch, and every bus's squared linear drop. One SVD serves all outputs; a ridge
   penalty per output is picked by exact leave-one-out error, like a GP its hyperparameters.
4. Each output keeps whichever of the linear and the physics fit has the lower leave-one-out
   error, so a context too small or too noisy for the second-order term falls back to ridge.

Any radial feeder: outputs are the non-slack buses, loads those that carry a load (`load_positions`
says which output each load sits at; IEEE 33 has a load at every bus). The tree is recovered over
the load buses; a bus without a load takes as downstream the loads that share its whole path
(`downstream_of_outputs`), and a constant load (the same in every context row) is placed from the
sensitivities that are measured. Works in float64: the second-order term is ~1e-3 of the voltage
variation at small load perturbations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from scipy.stats import t as student_t

from models.base_fit import BasePrediction, ContextFit
from models.calibration import CALIBRATION_LEVEL, half_width_floor
from models.predictive import Method, StudentTPredictive
from models.ridge_loo import LOO_MIN_SLACK, PHYSICS_GRID, FixedLeverage, RidgeBasis, RidgeLOO, ridge_loo
from models.validation import check_context, check_queries

# Added to the LOO residuals' rms, relative to |y_mean| + 1, so a bus the context never moves keeps a
# positive scale: the physics-base checkpoints were trained with this floor (models/base_fit.py's
# RIDGE_SCALE_FLOOR is the ridge base's).
PHYSICS_SCALE_FLOOR = 1e-12
# A feature whose std over the context is below this share of its mean is constant: it keeps std 1
# and standardises to ~0 instead of dividing by (nearly) nothing.
CONSTANT_RTOL = 1e-12
# The compact fit's ridge on its 3 features, relative to n: only keeps a degenerate feature solvable.
COMPACT_PENALTY = 1e-8
# A bus is strictly shallower than another when its depth is below this share of the other's.
DEPTH_RTOL = 1e-9
# Relative to |mean| (+ the same, absolute): the std a constant load gets, so it standardises to 0.
CONSTANT_LOAD_STD = 1e-6
# PhysicsBaseMethod's spread: below this many context points also K-fold cross-validated (CV_FOLDS).
CV_BELOW_POINTS = 300
CV_FOLDS = 5
# Smallest spread it reports (p.u.): a bus whose voltage the context never moves still gets a density.
SPREAD_FLOOR_PU = 1e-12


def load_scaling(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std of each load over the context rows (..., n, d); a constant load (zero P or Q
    on some feeders) gets a tiny std instead of zero, so it standardises to 0 rather than NaN."""
    mean = x.mean(dim=-2)
    return mean, x.std(dim=-2, unbiased=False).clamp_min(_constant_std(mean))


def _constant_std(mean: torch.Tensor) -> torch.Tensor:
    return CONSTANT_LOAD_STD * (mean.abs() + CONSTANT_LOAD_STD)


def standardised_loads(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Loads x (..., m, d) standardised by a context's `load_scaling` (..., d), a load the context never moved at
    0 whatever the query: the fit knows nothing of its direction (an attacker pass: 50 rows moving one load,
    queries at 1.1-1.4x base answered 1e12-1e13 p.u. through its squared-flow terms of ~1e12 standardised
    units). What the move does is then the fit's miss on the network model (models.off_context)."""
    z = (x - mean[..., None, :]) / std[..., None, :]
    constant = std <= _constant_std(mean) * (1.0 + 1e-9)
    return torch.where(constant[..., None, :], torch.zeros_like(z), z)


@dataclass(frozen=True)
class CompactWeights:
    """DistFlow's second-order weights per output bus j and branch c (`_compact_weights`)."""

    loss: torch.Tensor  # (B, k, k): weight of branch c's squared flow in bus j's loss term
    path: torch.Tensor  # (B, k, k): weight of branch c's squared flow on bus j's own path

    def select(self, pick: torch.Tensor) -> CompactWeights:
        rows = pick[..., None].expand(-1, -1, self.loss.shape[-1])
        return CompactWeights(torch.gather(self.loss, 1, rows), torch.gather(self.path, 1, rows))


@dataclass(frozen=True)
class BranchFlows:
    """The recovered tree and the linear drops: what turns loads into DistFlow's features."""

    subtree: torch.Tensor  # (B, k, m): 1 where load i is downstream of (or at) output bus j
    drop_coef: torch.Tensor  # (B, d, k): linear fit on standardised loads, for the squared drops
    load_scale: torch.Tensor  # (B, d): std of each load, to form physical branch flows
    outputs: torch.Tensor | None = None  # (B, k'): which outputs the compact features are for (None: all, in order)

    def flows(self, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """P and Q through every output bus's upstream branch (B, n, k), centred, from standardised loads."""
        m = self.subtree.shape[-1]
        loads = xs * self.load_scale[:, None, :]  # centred physical loads
        return loads[..., :m] @ self.subtree.transpose(-1, -2), loads[..., m:] @ self.subtree.transpose(-1, -2)

    def features(self, xs: torch.Tensor) -> torch.Tensor:
        """[standardised loads, P_b^2, Q_b^2, P_b Q_b, drop_j^2] (B, n, d + 4k), unstandardised."""
        flow_p, flow_q = self.flows(xs)
        drop = xs @ self.drop_coef
        return torch.cat([xs, flow_p.square(), flow_q.square(), flow_p * flow_q, drop.square()], dim=-1)

    def compact_features(self, xs: torch.Tensor, weights: CompactWeights) -> torch.Tensor:
        """Per output bus: [loss term, own-path term, squared linear drop] (B, n, k', 3), unstandardised."""
        flow_p, flow_q = self.flows(xs)
        ell = flow_p.square() + flow_q.square()
        drop = xs @ self.drop_coef
        if self.outputs is not None:  # the state answers some outputs only (PhysicsFit.select)
            drop = torch.gather(drop, -1, self.outputs[:, None, :].expand(-1, drop.shape[-2], -1))
        return torch.stack(
            [ell @ weights.loss.transpose(-1, -2), ell @ weights.path.transpose(-1, -2), drop.square()], dim=-1
        )


@dataclass(frozen=True)
class PhysicsFit:
    """What a query needs: the tree, the linear drops, the feature scaling and the coefficients."""

    flows: BranchFlows
    feat_mean: torch.Tensor  # (B, p)
    feat_std: torch.Tensor  # (B, p)
    beta: torch.Tensor  # (B, p, k) on standardised features (zero rows past d where linear won)
    y_mean: torch.Tensor  # (B, k)
    leverage: FixedLeverage  # of the loads (leverage_on_loads) or of the full standardised design
    parent: torch.Tensor  # (B, m) int: recovered parent load bus (load index), -1 for none above it
    physics_used: torch.Tensor  # (B, k) bool: the physics fit won on leave-one-out error
    compact: CompactWeights
    compact_mean: torch.Tensor  # (B, k, 3): the compact features' mean and std over the context
    compact_std: torch.Tensor
    compact_gamma: torch.Tensor  # (B, 3, k): their coefficients (zero where compact_used is False)
    compact_used: torch.Tensor  # (B, k) bool: the compact DistFlow fit won on leave-one-out error
    leverage_on_loads: bool = False

    @property
    def n_context(self) -> int:
        return self.leverage.n_context

    def select(self, pick: torch.Tensor) -> PhysicsFit:
        """Keep outputs `pick` (B, k') for the coefficients; features still describe every bus."""
        per_bus = pick[..., None].expand(-1, -1, 3)
        outputs = pick if self.flows.outputs is None else torch.gather(self.flows.outputs, 1, pick)
        return replace(
            self,
            flows=replace(self.flows, outputs=outputs),
            beta=torch.gather(self.beta, 2, pick[:, None, :].expand(-1, self.beta.shape[1], -1)),
            y_mean=torch.gather(self.y_mean, 1, pick),
            physics_used=torch.gather(self.physics_used, 1, pick),
            compact=self.compact.select(pick),
            compact_mean=torch.gather(self.compact_mean, 1, per_bus),
            compact_std=torch.gather(self.compact_std, 1, per_bus),
            compact_gamma=torch.gather(self.compact_gamma, 2, pick[:, None, :].expand(-1, 3, -1)),
            compact_used=torch.gather(self.compact_used, 1, pick),
        )


def recover_tree(sens: torch.Tensor, varies: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Parent (B, k) and subtree membership (B, k, k) from load sensitivities (B, k, d), d = 2k.

    Scores from the P and Q halves (resistances and reactances) are added, each normalised by its
    deepest bus, so either alone suffices and both together resist noise. `varies` (B, d): which
    loads vary in the context (None: all). A constant load has no measured sensitivity, so the
    shared impedance of buses p and j comes from whichever of S[p, j] and S[j, p] is measured
    (their mean when both are; nothing when neither is).
    """
    k = sens.shape[1]
    score = torch.zeros(sens.shape[0], k, k, dtype=sens.dtype, device=sens.device)
    if varies is None:
        varies = torch.ones(sens.shape[0], 2 * k, dtype=torch.bool, device=sens.device)
    for half, measured in ((sens[..., :k], varies[:, :k]), (sens[..., k:], varies[:, k:])):
        by_column = measured[:, None, :].to(sens.dtype).expand(-1, k, -1)  # [p, j]: S[p, j] is measured
        weight = by_column + by_column.transpose(-1, -2)
        common = -(half * by_column + (half * by_column).transpose(-1, -2)) / weight.clamp_min(1.0)
        # A constant load's own depth is unmeasured: the most it shares with a measured load is its
        # depth when one lies below it (and a lower bound otherwise).
        shared_most = torch.where(by_column.bool(), common, torch.full_like(common, -torch.inf)).amax(dim=-1)
        depth = torch.where(measured, torch.diagonal(common, dim1=-2, dim2=-1), shared_most.clamp_min(0.0))
        common = common.clone()
        torch.diagonal(common, dim1=-2, dim2=-1).copy_(depth)
        norm = depth.abs().amax(dim=-1).clamp_min(torch.finfo(sens.dtype).tiny)[:, None, None]
        score = score + (2 * common - depth[..., :, None]) / norm  # score[p, j]
    depth = torch.diagonal(score, dim1=-2, dim2=-1)  # (B, k): sum of normalised depths
    shallower = depth[:, :, None] < depth[:, None, :]  # [p, j]: p is shallower than j
    masked = torch.where(shallower, score, torch.full_like(score, -torch.inf))
    best, parent = masked.max(dim=1)  # over p, for each j
    parent = torch.where(best > 0, parent, torch.full_like(parent, -1))
    hop = torch.zeros_like(score)  # hop[j, p] = 1 when p is j's parent
    has = parent >= 0
    b_idx, j_idx = has.nonzero(as_tuple=True)
    hop[b_idx, j_idx, parent[b_idx, j_idx]] = 1.0
    reach = torch.eye(k, dtype=score.dtype, device=score.device).expand_as(score).clone()
    step = hop
    for _ in range(k):  # depth-wise strictly increasing parents: no cycles, at most k hops
        if not bool(step.any()):
            break
        reach = reach + step
        step = step @ hop
    return parent, reach.clamp_max(1.0).transpose(-1, -2)  # subtree[p, j] = p is j or j's ancestor


# Relative tolerance under which a load shares a load-less bus's whole path (see downstream_of_outputs).
SHARED_PATH_TOLERANCE = 0.05


def downstream_of_outputs(sens: torch.Tensor, load_positions: torch.Tensor, load_subtree: torch.Tensor) -> torch.Tensor:
    """(B, k, m): 1 where load i is downstream of (or at) output bus j, for every output bus.

    Load buses take their rows from the recovered tree. A bus j without a load shares with load i
    the resistance of their common path, -S[j, i]; the loads below j share all of j's path, the
    most any load shares with it, so they are the loads within SHARED_PATH_TOLERANCE of that most
    (P and Q halves normalised and added as in `recover_tree`). A bus with no load below it (a
    load-less leaf) carries no flow; it gets the loads of the bus it hangs from, a duplicate feature
    the ridge fit shares out; a bus no load shares any path with gets an empty row.
    """
    b, k, d = sens.shape
    m = d // 2
    subtree = torch.zeros(b, k, m, dtype=sens.dtype, device=sens.device)
    subtree[:, load_positions] = load_subtree
    others = torch.ones(k, dtype=torch.bool, device=sens.device)
    others[load_positions] = False
    if not bool(others.any()):
        return subtree
    shared = torch.zeros(b, int(others.sum()), m, dtype=sens.dtype, device=sens.device)
    for half in (sens[..., :m], sens[..., m:]):
        common = -half[:, others]  # (B, k', m)
        norm = common.amax(dim=(-2, -1), keepdim=True).clamp_min(torch.finfo(sens.dtype).tiny)
        shared = shared + common / norm
    most = shared.amax(dim=-1, keepdim=True)
    below = (shared >= most * (1 - SHARED_PATH_TOLERANCE)) & (most > 0)
    subtree[:, others] = below.to(sens.dtype)
    return subtree


def _compact_weights(sens: torch.Tensor, subtree: torch.Tensor, load_positions: torch.Tensor) -> CompactWeights:
    """DistFlow's second-order weights from the sensitivities alone, for every output bus j and
    branch c (the branch into output bus c).

    With rho[j, i] = -dV_j/dP_i the resistance shared by bus j and load i (likewise xi with Q), bus
    j's depth R_j is the most it shares with any load, c's branch resistance is R_c minus its
    parent's depth, and the resistance j shares with c is min(R_c, rho[j, i] for loads i below c).
    A branch's loss r_c (P_c^2 + Q_c^2) flows in from upstream like a load at c, so it lowers |V_j|
    by rho_common(j, c) r_c (+ the X part); on j's own path the (r^2 + x^2)(P^2 + Q^2) / 2 term adds.
    """
    m = load_positions.shape[0]
    weights = []
    for half in (sens[..., :m], sens[..., m:]):
        shared = (-half).clamp_min(0.0)  # (B, k, m): resistance j shares with load i
        depth = shared.amax(dim=-1)  # (B, k)
        below = subtree > 0.5  # (B, c, m): loads below output c
        # common[j, c] = min over loads i below c of shared[j, i], capped at c's depth
        by_load = shared[:, :, None, :]
        masked = torch.where(below[:, None, :, :], by_load, torch.full_like(by_load, torch.inf))
        common = torch.minimum(masked.amin(dim=-1), depth[:, None, :])  # (B, j, c)
        common = torch.where(below.any(dim=-1)[:, None, :], common, torch.zeros_like(common))
        # parent depth: the deepest output strictly above c whose loads include all of c's
        contains = (subtree @ (1.0 - subtree).transpose(-1, -2)) < 0.5  # [c, p]: no load of c that p lacks
        above = contains & (depth[:, None, :] < depth[:, :, None] * (1 - DEPTH_RTOL))
        parent_depth = torch.where(above, depth[:, None, :], torch.zeros_like(common)).amax(dim=-1)
        weights.append((common, (depth - parent_depth).clamp_min(0.0)))
    (rho, r), (xi, x) = weights
    loss = rho * r[:, None, :] + xi * x[:, None, :]
    on_path = rho >= (1 - SHARED_PATH_TOLERANCE) * torch.diagonal(rho, dim1=-2, dim2=-1)[:, None, :]
    path = on_path.to(sens.dtype) * 0.5 * (r.square() + x.square())[:, None, :]
    return CompactWeights(loss, path)


@dataclass(frozen=True)
class CompactFit:
    """`_compact_fit`'s answer per output bus."""

    beta: torch.Tensor  # (B, d, k) on the standardised loads
    gamma: torch.Tensor  # (B, 3, k) on the standardised compact features
    loo: torch.Tensor  # (B, n, k) leave-one-out residuals
    loo_mse: torch.Tensor  # (B, k) their mean square (inf where a point is nearly interpolated)


def _compact_fit(xs: torch.Tensor, yc: torch.Tensor, g: torch.Tensor, lin: RidgeLOO) -> CompactFit:
    """Each bus's ridge on the loads plus its own 3 compact features g (B, n, k, 3), by partialling
    the loads out (Frisch-Waugh at the linear fit `lin`'s penalty)."""
    u, vh, shrink, coef = lin.u, lin.vh, lin.shrink, lin.coef
    n = xs.shape[-2]

    def project(a: torch.Tensor) -> torch.Tensor:  # U^T a: (B, n, k, f) -> (B, r, k, f)
        out = u.transpose(-1, -2) @ a.flatten(2)
        return out.view(*out.shape[:2], *a.shape[2:])

    def hat(a: torch.Tensor) -> torch.Tensor:  # each output's hat matrix U diag(shrink_k) U^T applied to a (B, n, k, f)
        shrunk = project(a) * shrink.transpose(-1, -2)[..., None]
        out = u @ shrunk.flatten(2)
        return out.view(*out.shape[:2], *a.shape[2:])

    g_res = g - hat(g)  # features with the loads partialled out
    y_res = yc - hat(yc[..., None])[..., 0]
    gram = torch.einsum("bnkf,bnkh->bkfh", g_res, g_res)
    gram = gram + COMPACT_PENALTY * n * torch.eye(3, dtype=g.dtype, device=g.device)
    gamma = torch.linalg.solve(gram, torch.einsum("bnkf,bnk->bkf", g_res, y_res)[..., None])[..., 0]  # (B, k, 3)
    resid = y_res - torch.einsum("bnkf,bkf->bnk", g_res, gamma)
    lin_h = u.square() @ shrink.transpose(-1, -2)  # (B, n, k)
    proj = torch.linalg.solve(gram, g_res.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)  # M g_res^T: (B, n, k, 3)
    extra = (proj * (g_res - hat(g_res))).sum(-1)  # diag of g_res M g_res^T (I - H)
    leverage = lin_h + 1.0 / n + extra
    loo = resid / (1.0 - leverage).clamp_min(LOO_MIN_SLACK)
    err = loo.square().mean(dim=-2)
    err = torch.where((1.0 - leverage).amin(dim=-2) > LOO_MIN_SLACK, err, torch.full_like(err, torch.inf))
    load_part = vh.transpose(-1, -2) @ ((project(g) * gamma[:, None]).sum(-1) * coef.transpose(-1, -2))  # (B, d, k)
    return CompactFit(lin.beta - load_part, gamma.transpose(-1, -2), loo, err)


def _standardise(raw: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std of features over the context rows (axis `dim`); a constant one keeps std 1."""
    mean, std = raw.mean(dim=dim), raw.std(dim=dim, unbiased=False)
    return mean, torch.where(std > CONSTANT_RTOL * (mean.abs() + 1e-300), std, torch.ones_like(std))


def fit(
    xs: torch.Tensor,
    y: torch.Tensor,
    x_std: torch.Tensor,
    load_positions: torch.Tensor | Sequence[int] | None = None,
    leverage_from: str = "design",
    linear: RidgeBasis | None = None,
) -> ContextFit[PhysicsFit]:
    """Fit on standardised loads xs (B, n, d) and targets y (B, n, k), float64.

    `load_positions` (m,): the output index of each load bus, d = 2m; None when the outputs are the
    load buses in feature order (d = 2k). Outputs without a load (junctions, load-less leaves) get
    their downstream loads from `downstream_of_outputs`.

    The residuals are the LOO residuals (B, n, k) of the chosen fit per output, the leverage that at
    the fixed penalty (B, n) of the full design (`leverage_from="design"`) or of the loads alone
    ("loads": inputs only, so a context's last digits cannot flip it through the recovered tree).
    `linear`: xs's RidgeBasis on PHYSICS_GRID where the caller keeps it for several fits of the same loads
    (`ContextLoads`); everything past the linear fit depends on y through the recovered tree and drops.
    """
    if leverage_from not in ("design", "loads"):
        raise ValueError(f"leverage_from: expected 'design' or 'loads', got {leverage_from!r}")
    xs, y = xs.double(), y.double()
    d, k = xs.shape[-1], y.shape[-1]
    if load_positions is None:
        if d != 2 * k:
            raise ValueError(f"physics base: expected 2 loads (P, Q) per output bus, got {d} inputs for {k} outputs")
        load_positions = torch.arange(k, device=xs.device)
    load_positions = torch.as_tensor(load_positions, dtype=torch.long, device=xs.device)
    if d != 2 * len(load_positions):
        raise ValueError(f"physics base: {d} inputs for {len(load_positions)} load buses (expected P and Q of each)")
    y_mean = y.mean(dim=-2)
    yc = y - y_mean[:, None, :]
    lin = (RidgeBasis.of(xs, PHYSICS_GRID) if linear is None else linear).fit(yc)
    sens = (lin.beta / x_std.double()[..., None]).transpose(-1, -2)  # (B, k, d) in p.u. per MW / MVAr
    varies = xs.std(dim=-2) > 0.5  # standardised: 1 where a load varies, 0 where it is constant
    parent, load_subtree = recover_tree(sens[:, load_positions], varies)
    flows = BranchFlows(downstream_of_outputs(sens, load_positions, load_subtree), lin.beta, x_std.double())
    raw = flows.features(xs)
    feat_mean, feat_std = _standardise(raw, dim=-2)
    feat_mean[..., :d], feat_std[..., :d] = 0.0, 1.0  # the loads are standardised already
    full = ridge_loo((raw - feat_mean[:, None, :]) / feat_std[:, None, :], yc, PHYSICS_GRID)
    physics_used = full.loo_mse < lin.loo_mse
    lin_full = torch.cat([lin.beta, torch.zeros_like(full.beta[:, d:])], dim=1)
    beta = torch.where(physics_used[:, None, :], full.beta, lin_full)
    loo = torch.where(physics_used[:, None, :], full.loo, lin.loo)
    best_err = torch.minimum(full.loo_mse, lin.loo_mse)
    compact = _compact_weights(sens, flows.subtree, load_positions)
    g_raw = flows.compact_features(xs, compact)
    g_mean, g_std = _standardise(g_raw, dim=-3)
    compact_fit = _compact_fit(xs, yc, (g_raw - g_mean[:, None]) / g_std[:, None], lin)
    compact_used = compact_fit.loo_mse < best_err
    compact_full = torch.cat([compact_fit.beta, torch.zeros_like(beta[:, d:])], dim=1)
    beta = torch.where(compact_used[:, None, :], compact_full, beta)
    loo = torch.where(compact_used[:, None, :], compact_fit.loo, loo)
    physics_used = physics_used & ~compact_used
    gamma = torch.where(compact_used[:, None, :], compact_fit.gamma, torch.zeros_like(compact_fit.gamma))
    on_loads = leverage_from == "loads"
    source = lin if on_loads else full
    leverage, in_sample = FixedLeverage.of(source.u, source.s, source.vh)
    result = PhysicsFit(
        flows=flows,
        feat_mean=feat_mean,
        feat_std=feat_std,
        beta=beta,
        y_mean=y_mean,
        leverage=leverage,
        parent=parent,
        physics_used=physics_used,
        compact=compact,
        compact_mean=g_mean,
        compact_std=g_std,
        compact_gamma=gamma,
        compact_used=compact_used,
        leverage_on_loads=on_loads,
    )
    return ContextFit(result, loo, in_sample)


def predict(state: PhysicsFit, xs: torch.Tensor, leverage: bool = True) -> BasePrediction:
    """Base prediction (B, m, k) float64 and the leverage each query would have in the context (B, m),
    or None when `leverage` is False (the full design is then built only if some bus uses it)."""
    xs = xs.double()
    d = xs.shape[-1]
    design = None  # the full design is built only where a bus or the leverage uses it
    if (leverage and not state.leverage_on_loads) or bool(state.physics_used.any()):
        design = (state.flows.features(xs) - state.feat_mean[:, None, :]) / state.feat_std[:, None, :]
        loc = design @ state.beta + state.y_mean[:, None, :]
    else:  # linear and compact buses have no coefficients past the loads
        loc = xs @ state.beta[:, :d] + state.y_mean[:, None, :]
    if bool(state.compact_used.any()):
        g = state.flows.compact_features(xs, state.compact)
        g = (g - state.compact_mean[:, None]) / state.compact_std[:, None]
        loc = loc + torch.einsum("bnkf,bfk->bnk", g, state.compact_gamma)
    if not leverage:
        return BasePrediction(loc, None)
    return BasePrediction(loc, state.leverage.at(xs if design is None or state.leverage_on_loads else design))


class PhysicsBase:
    """The physics fit as ModelConfig.base="physics" (models/base_fit.py's BaseFit)."""

    scale_floor = PHYSICS_SCALE_FLOOR

    def __init__(self, load_positions: torch.Tensor | Sequence[int] | None = None, leverage_from: str = "design"):
        self.load_positions, self.leverage_from = load_positions, leverage_from

    def fit(self, xs: torch.Tensor, y: torch.Tensor, x_std: torch.Tensor) -> ContextFit[PhysicsFit]:
        return fit(xs, y, x_std, self.load_positions, self.leverage_from)

    def predict(self, fitted: PhysicsFit, xs: torch.Tensor) -> BasePrediction:
        return predict(fitted, xs)


@dataclass(frozen=True)
class RawLoadFit:
    """fit() on raw loads: the state and the load scaling it standardised them with."""

    state: PhysicsFit
    x_mean: torch.Tensor  # (1, d)
    x_std: torch.Tensor  # (1, d)

    def location(self, x: torch.Tensor) -> torch.Tensor:
        """The base prediction (1, m, k) at raw loads x (1, m, d)."""
        return predict(self.state, standardised_loads(x, self.x_mean, self.x_std), leverage=False).loc


@dataclass(frozen=True)
class ContextLoads:
    """The part of fit() on raw loads that depends on the loads alone: their scaling and the linear fit's SVD. Kept
    for several fits of the same loads (`PhysicsBaseMethod.fit_many`: the guard's noisy probes, models.off_context);
    the physics design's SVD, most of a fit, is not shareable: its tree and drops come from each fit's voltages."""

    mean: torch.Tensor  # (1, d) `load_scaling`
    std: torch.Tensor  # (1, d)
    xs: torch.Tensor  # (1, n, d) standardised
    linear: RidgeBasis  # of xs on PHYSICS_GRID

    @classmethod
    def of(cls, x: torch.Tensor) -> ContextLoads:
        mean, std = load_scaling(x)
        xs = standardised_loads(x, mean, std).double()
        return cls(mean, std, xs, RidgeBasis.of(xs, PHYSICS_GRID))


def _fit_raw(
    loads: ContextLoads, y: torch.Tensor, load_positions: torch.Tensor | Sequence[int] | None
) -> tuple[RawLoadFit, torch.Tensor]:
    """fit() on raw loads (`loads`) and voltages y (1, n, k): the fit and its LOO residuals (1, n, k)."""
    result = fit(loads.xs, y, loads.std, load_positions, linear=loads.linear)
    return RawLoadFit(result.fitted, loads.mean, loads.std), result.residuals


def cross_validated_errors(
    x: torch.Tensor, y: torch.Tensor, load_positions: torch.Tensor | Sequence[int] | None, folds: int = CV_FOLDS
) -> torch.Tensor:
    """Held-out residuals (n, k) of the whole fit, tree recovery and model choice included, by
    K-fold cross-validation on interleaved folds (rows i, i + K, ...). Leave-one-out residuals of
    the final fit miss those choices, which on a small context made its error look up to 2x smaller."""
    return _cross_validated(x, _fold_loads(x, folds), y, load_positions)


def _fold_loads(x: torch.Tensor, folds: int) -> tuple[ContextLoads, ...]:
    """Each fold's training rows' `ContextLoads` (`cross_validated_errors`' folds)."""
    fold = torch.arange(x.shape[-2]) % folds
    return tuple(ContextLoads.of(x[:, fold != f]) for f in range(folds))


def _cross_validated(
    x: torch.Tensor,
    trained: tuple[ContextLoads, ...],
    y: torch.Tensor,
    load_positions: torch.Tensor | Sequence[int] | None,
) -> torch.Tensor:
    """`cross_validated_errors` with each fold's training loads `trained` (`_fold_loads`) given."""
    fold = torch.arange(x.shape[-2]) % len(trained)
    out = torch.empty_like(y[0])
    for f, loads in enumerate(trained):
        held = fold == f
        fitted, _ = _fit_raw(loads, y[:, fold != f], load_positions)
        out[held] = y[0, held] - fitted.location(x[:, held])[0]
    return out


@dataclass(frozen=True)
class PhysicsBaseFitted:
    """PhysicsBaseMethod's fitted context."""

    base: RawLoadFit
    spread: np.ndarray  # (k,) each output's Student-t scale, p.u.
    dof: int  # the t's degrees of freedom
    heldout: np.ndarray  # (n, k) the leave-one-out errors the spread was taken from, p.u.
    cv: np.ndarray | None = None  # (n, k) the K-fold errors too, on a context under CV_BELOW_POINTS rows


def heldout_spread(loo: np.ndarray, cv: np.ndarray | None) -> np.ndarray:
    """(k,) the spread from held-out errors (n, k): the rms leave-one-out error, and where the K-fold errors
    are given the larger of it, their rms and the small-context floor (models.calibration.half_width_floor)."""
    spread = np.sqrt(np.mean(np.square(loo), axis=0))
    if cv is not None:
        t95 = student_t.ppf(0.5 + CALIBRATION_LEVEL / 2, loo.shape[0] - 1)
        spread = np.maximum.reduce([spread, np.sqrt(np.mean(np.square(cv), axis=0)), half_width_floor(cv) / t95])
    out: np.ndarray = np.maximum(spread, SPREAD_FLOOR_PU)
    return out


class PhysicsBaseMethod(Method):
    """The base fit alone as a predictor: its mean, and a Student-t spread from held-out errors.

    What the closed form gives without a network, on any radial feeder (the service's `physics-fit`
    model, which serves feeders no checkpoint was trained for) and as a baseline for the PFN built
    on it. The spread per bus is the rms leave-one-out error, on a context under CV_BELOW_POINTS the
    larger of it and the K-fold cross-validated error of the whole fit, and no narrower than the
    PFNs' small-context floor (models.calibration.half_width_floor); the t's degrees of freedom
    (residuals - 1) carry the uncertainty of that estimate itself. With the readings' meter noise
    known row by row (`without_meter_noise`) those errors are taken less it (models.meter_noise)."""

    name = "physics base (closed form)"

    def __init__(self, load_positions: torch.Tensor | Sequence[int] | np.ndarray | None = None):
        self.load_positions = None if load_positions is None else torch.as_tensor(load_positions, dtype=torch.long)

    def fit(self, context_x: np.ndarray, context_y: np.ndarray) -> PhysicsBaseFitted:
        fitted: PhysicsBaseFitted = self.fit_many(context_x, [context_y])[0]
        return fitted

    def fit_many(self, context_x: np.ndarray, targets: Sequence[np.ndarray]) -> list[PhysicsBaseFitted]:
        """`fit` of each voltage set, the loads' share of the work (`ContextLoads`, and each K-fold's) done once."""
        checked = [check_context(context_x, y) for y in targets]
        if not checked:
            return []
        xt = torch.as_tensor(checked[0][0], dtype=torch.float64)[None]
        n = xt.shape[-2]
        loads = ContextLoads.of(xt)
        trained = _fold_loads(xt, CV_FOLDS) if n < CV_BELOW_POINTS else None
        out = []
        for _, y in checked:
            yt = torch.as_tensor(y, dtype=torch.float64)[None]
            base, loo = _fit_raw(loads, yt, self.load_positions)
            heldout = loo[0].numpy()
            cv = None if trained is None else _cross_validated(xt, trained, yt, self.load_positions).numpy()
            out.append(PhysicsBaseFitted(base, heldout_spread(heldout, cv), n - 1, heldout, cv))
        return out

    def heldout_rms(self, fitted: PhysicsBaseFitted) -> np.ndarray:
        return fitted.spread

    def without_meter_noise(
        self, fitted: PhysicsBaseFitted, context_x: np.ndarray, context_y: np.ndarray, noise: np.ndarray
    ) -> PhysicsBaseFitted:
        """`fitted` with its spread taken from its held-out errors less each reading's meter noise (n, k)."""
        loo = fitted.heldout - noise
        cv = None if fitted.cv is None else fitted.cv - noise
        return replace(fitted, spread=heldout_spread(loo, cv), heldout=loo, cv=cv)

    def predict(self, fitted: PhysicsBaseFitted, query_x: np.ndarray) -> StudentTPredictive:
        q = torch.as_tensor(check_queries(query_x, d=fitted.base.x_mean.shape[-1]), dtype=torch.float64)[None]
        loc = fitted.base.location(q)
        spread = np.broadcast_to(fitted.spread, loc.shape[1:]).copy()
        return StudentTPredictive(loc[0].numpy(), spread, float(fitted.dof))
