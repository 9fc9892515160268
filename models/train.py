"""Prior-data training: bar-distribution NLL on held-out points of synthetic datasets.

AdamW with linear warmup then cosine decay, random context sizes, periodic validation on
fixed prior datasets, and atomic checkpoints (model, optimizer, progress) every few minutes so
a run killed at any moment resumes where its last checkpoint left off (`resume=True`).
Each step's data comes from a generator seeded by (seed, step): a resumed run sees exactly
the datasets an uninterrupted one would have.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from gridsim.network import network
from models.bar_distribution import BarDistribution
from models.config import TrainConfig
from models.distillation import Teacher, cross_entropy
from models.model import DVAPFN, base_fit_for
from models.priors import PriorBatch, make_prior

log = logging.getLogger(__name__)

LATEST = "latest.json"


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass
class Progress:
    """What a run has done so far; saved with every checkpoint."""

    step: int = 0
    train_seconds: float = 0.0
    datasets_seen: int = 0
    best_val_nll: float = math.inf
    best_step: int = -1
    history: list[list[float]] = field(default_factory=list)  # [step, train_loss, val_nll]
    device: str = "cpu"
    threads: int = 0  # torch intra-op threads of the run (CPU-hours = wall hours x threads, an upper bound)
    # weights the run started from instead of a fresh initialisation (see init_record)
    init: dict[str, Any] | None = None


def init_record(weights: Path) -> dict[str, Any]:
    """Where a warm-started run's first weights came from: the file, its sha256 and, when a
    registry card sits beside it, that checkpoint's name, version and training steps."""
    from models.registry import sha256_file

    record: dict[str, Any] = {"weights": str(weights), "sha256": sha256_file(weights)}
    card_path = weights.parent / "card.json"
    if card_path.exists():
        card = json.loads(card_path.read_text())
        record.update(
            name=card.get("name"), version=card.get("version"), steps=(card.get("training") or {}).get("steps")
        )
    return record


def _generator(seed: int, stream: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + stream)


def for_network(config: TrainConfig, name: str) -> TrainConfig:
    """The same architecture and prior family on another feeder: its inputs, its outputs, its loads.

    Sets the power-flow prior's network, the model's input width and which output each load sits
    at (the physics base fit needs it where buses carry no load)."""
    if config.prior.get("kind", "powerflow") != "powerflow":
        raise ValueError(
            f"--network: only a power-flow prior has a network (this config's prior is {config.prior.get('kind')!r})"
        )
    net = network(name)
    positions = tuple(int(i) for i in net.load_positions)
    model = dataclasses.replace(config.model, d_in=net.n_features, load_positions=positions)
    return dataclasses.replace(config, model=model, prior={**config.prior, "network": net.name})


@dataclass(frozen=True)
class Split:
    """A batch split for training: context (cx, cy), queries qx and their picked outputs' targets qy,
    the picked outputs `pick` (B, k), and the network model's voltages at every point (B, N, k_all) or None."""

    cx: torch.Tensor
    cy: torch.Tensor
    qx: torch.Tensor
    qy: torch.Tensor
    pick: torch.Tensor
    probe: torch.Tensor | None = None

    @property
    def context_probe(self) -> torch.Tensor | None:
        return None if self.probe is None else self.probe[:, : self.cx.shape[1]]

    @property
    def query_probe(self) -> torch.Tensor | None:
        return None if self.probe is None else self.probe[:, self.cx.shape[1] :]


class Trainer:
    """Owns one run directory: config, checkpoints, best weights."""

    def __init__(
        self,
        config: TrainConfig,
        run_dir: str | Path,
        resume: bool = False,
        init_weights: str | Path | None = None,
        init_partial: bool = False,
    ):
        """`init_weights`: start a new run from these weights (borders included) instead of a fresh
        initialisation, with a fresh optimizer and the config's schedule (a warm restart).
        `init_partial`: the weights may come from a different width; every tensor whose name and
        shape match transfers, the rest keep their fresh initialisation (a narrow student that
        inherits a teacher's x stream)."""
        self.config = config
        self.run_dir = Path(run_dir)
        self.device = resolve_device(config.device)
        self.prior = make_prior(config.prior_config(), device=str(self.device))  # a GPU run draws there
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)  # the initial weights are part of the run's identity
            self.model = DVAPFN(config.model).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.progress = Progress(device=str(self.device), threads=torch.get_num_threads())
        self.run_dir.mkdir(parents=True, exist_ok=True)
        saved = self.run_dir / "config.json"
        if resume and (self.run_dir / LATEST).exists():
            if init_weights is not None:
                raise ValueError("init_weights: only for a new run; this run resumes from its own checkpoint")
            self._load_latest()
        else:
            if (self.run_dir / LATEST).exists():
                raise ValueError(
                    f"run_dir: {self.run_dir} already holds a run; pass resume=True or use a new directory"
                )
            if init_weights is not None:
                self._load_init_weights(Path(init_weights), partial=init_partial)
            else:
                self._set_borders()
        config.save(saved)
        self.teacher = None if config.teacher is None else Teacher(config.teacher, self.device)
        if self.teacher is not None:
            self.teacher.check_student(self.model)
        self.bar = BarDistribution(self.model.borders)  # built once: borders are fixed from here on
        # one batch of every validation dataset on the prior's one feeder; a prior over feeders draws
        # each training batch's worth on its own feeder
        per_batch = config.batch_size if config.model.any_network else config.val_datasets
        self.val_batches = [
            self.prior.sample(
                min(per_batch, config.val_datasets - start),
                max(config.n_context) + config.n_query,
                _generator(config.seed, -1 - start // per_batch),
                n_context=max(config.n_context),
            )
            for start in range(0, config.val_datasets, per_batch)
        ]

    # -- data -----------------------------------------------------------------------------
    def _bind(self, batch: PriorBatch) -> PriorBatch:
        """A model of any feeder learns on the batch's feeder: its base fit is told where the loads sit."""
        if self.config.model.any_network:
            if batch.load_positions is None:
                raise ValueError("prior: a model of any feeder needs a prior over feeders (prior.random_feeders)")
            self.model.load_positions = batch.load_positions
            self.model.base = base_fit_for(self.config.model, batch.load_positions)
        return batch

    def _split(self, batch: PriorBatch, n_context: int, generator: torch.Generator, rows: slice = slice(None)) -> Split:
        """Pick outputs per dataset and split points into context and held-out queries (of datasets `rows`).

        The context keeps every output (the base fit sees every bus); the model is trained on
        the picked outputs `pick` (B, k) only, and the queries' targets are those.
        """
        x, y = batch.x[rows].to(self.device), batch.y[rows].to(self.device)
        k_total = y.shape[-1]
        k = min(self.config.outputs_per_dataset, k_total)
        pick = torch.rand(y.shape[0], k_total, generator=generator).argsort(dim=-1)[:, :k].to(self.device)
        qy = torch.gather(y[:, n_context:], -1, pick[:, None, :].expand(-1, y.shape[1] - n_context, -1))
        probe = None if batch.probe_y is None else batch.probe_y[rows].to(self.device)
        return Split(x[:, :n_context], y[:, :n_context], x[:, n_context:], qy, pick, probe)

    def _context_size(self, g: torch.Generator) -> int:
        """Context size of a batch: uniform or log-uniform over the config's range."""
        lo, hi = self.config.n_context
        if self.config.context_sampling == "log-uniform":
            u = float(torch.rand((), generator=g, dtype=torch.float64))
            return min(hi, int(math.exp(math.log(lo) + u * (math.log(hi + 1) - math.log(lo)))))
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    def _set_borders(self) -> None:
        """Borders of equal prior mass for the standardised residuals the model will predict."""
        cfg = self.config
        g = _generator(cfg.seed, -2)
        samples = []
        for _ in range(max(1, cfg.border_samples // cfg.batch_size)):
            n_context = self._context_size(g)
            batch = self._bind(self.prior.sample(cfg.batch_size, n_context + cfg.n_query, g, n_context=n_context))
            with torch.no_grad():
                samples.append(self.standardised_targets(self._split(batch, n_context, g)).flatten())
        bar = BarDistribution.from_samples(torch.cat(samples).cpu(), cfg.model.n_bars)
        self.model.borders.copy_(bar.borders.to(self.model.borders))

    # -- optimisation ----------------------------------------------------------------------
    def _lr(self, step: int) -> float:
        cfg = self.config
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    def standardised_targets(self, split: Split) -> torch.Tensor:
        """The held-out targets (B, k, m) in the bars' units, without the attention (what the borders place)."""
        cache = self.model.encode_context(split.cx, split.cy, split.pick, split.context_probe)
        loc, _ = self.model.predict_base(cache.stats, split.qx)
        scale = self.model.query_scale(cache.stats, split.qx, split.query_probe)
        return self.model.standardised_target(split.qy, loc, scale)

    def loss(self, split: Split, distill: bool = True) -> torch.Tensor:
        """Mean NLL of held-out targets (of outputs `pick`) under the predicted bar distribution; with
        a teacher (and `distill`) mixed with the cross-entropy against the teacher's bars."""
        cx, cy, qx, qy, pick = split.cx, split.cy, split.qx, split.qy, split.pick
        logits, loc, scale = self.model(cx, cy, qx, pick, split.probe)
        z = self.model.standardised_target(qy, loc, scale)
        nll = -self.bar.log_prob(logits, z).mean()
        weight = self.config.distill_weight
        if self.teacher is None or not distill or weight == 0.0:
            return nll
        taught = cross_entropy(logits, self.teacher.targets(cx, cy, qx, pick, self.model.borders))
        return (1.0 - weight) * nll + weight * taught

    def validate(self) -> float:
        cfg = self.config
        self.model.eval()
        with torch.no_grad():
            g = _generator(cfg.seed, -3)
            losses = []
            for batch in self.val_batches:
                self._bind(batch)
                for start in range(0, len(batch.x), cfg.batch_size):
                    rows = slice(start, start + cfg.batch_size)
                    losses.append(float(self.loss(self._split(batch, max(cfg.n_context), g, rows), distill=False)))
        self.model.train()
        return sum(losses) / len(losses)

    def run(self, max_minutes: float | None = None, show_progress: bool = True) -> Progress:
        """Train until `config.steps` or `max_minutes`, checkpointing along the way."""
        cfg, p = self.config, self.progress
        started = time.monotonic()
        last_ckpt = started
        bar = tqdm(total=cfg.steps, initial=p.step, disable=not show_progress, mininterval=10, desc="train")
        loss_ema = None
        stop = _StopRequest()
        while p.step < cfg.steps:
            t0 = time.monotonic()
            g = _generator(cfg.seed, p.step)
            n_context = self._context_size(g)
            batch = self._bind(self.prior.sample(cfg.batch_size, n_context + cfg.n_query, g, n_context=n_context))
            for group in self.optimizer.param_groups:
                group["lr"] = self._lr(p.step)
            loss = self.loss(self._split(batch, n_context, g))
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
            self.optimizer.step()
            p.step += 1
            p.datasets_seen += cfg.batch_size
            p.train_seconds += time.monotonic() - t0
            value = loss.item()
            loss_ema = value if loss_ema is None else 0.98 * loss_ema + 0.02 * value
            bar.update(1)
            if p.step % cfg.val_every == 0 or p.step == cfg.steps:
                val = self.validate()
                p.history.append([p.step, loss_ema, val])
                bar.set_postfix(
                    loss=f"{loss_ema:.3f}", val_nll=f"{val:.3f}", steps_s=f"{p.step / max(p.train_seconds, 1e-9):.2f}"
                )
                log.info(
                    "step %d train %.4f val %.4f (%.2f steps/s)",
                    p.step,
                    loss_ema,
                    val,
                    p.step / max(p.train_seconds, 1e-9),
                )
                if val < p.best_val_nll:
                    p.best_val_nll, p.best_step = val, p.step
                    self._atomic_save_weights(self.run_dir / "best.safetensors")
            now = time.monotonic()
            out_of_time = (max_minutes is not None and now - started > max_minutes * 60) or stop.requested
            if now - last_ckpt > cfg.checkpoint_minutes * 60 or out_of_time or p.step == cfg.steps:
                self.save_checkpoint()
                last_ckpt = now
            if out_of_time:
                break
        bar.close()
        stop.restore()
        if stop.requested:
            log.info("stopped by signal at step %d, checkpoint written", p.step)
        return p

    # -- checkpoints -------------------------------------------------------------------------
    def _atomic_save_weights(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        save_file({k: v.detach().contiguous().cpu() for k, v in self.model.state_dict().items()}, str(tmp))
        os.replace(tmp, path)

    def save_checkpoint(self) -> Path:
        """Write ckpt-<step>/ completely, then point latest.json at it, then drop older ones."""
        name = f"ckpt-{self.progress.step:08d}"
        final = self.run_dir / name
        tmp = self.run_dir / (name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_file(
            {k: v.detach().contiguous().cpu() for k, v in self.model.state_dict().items()},
            str(tmp / "model.safetensors"),
        )
        torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "progress.json").write_text(json.dumps(self.progress.__dict__, indent=1))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        latest_tmp = self.run_dir / (LATEST + ".tmp")
        latest_tmp.write_text(json.dumps({"checkpoint": name}))
        os.replace(latest_tmp, self.run_dir / LATEST)
        for old in self.run_dir.glob("ckpt-*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)
        log.info("checkpoint %s written", final)
        return final

    def _load_init_weights(self, weights: Path, partial: bool = False) -> None:
        if not weights.is_file():
            raise ValueError(f"init_weights: {weights} is not a file (expected a model.safetensors)")
        try:
            found = load_file(str(weights), device=str(self.device))
        except (RuntimeError, OSError) as exc:  # not a safetensors file
            raise ValueError(f"init_weights: {weights} is not readable weights: {exc}") from None
        own = self.model.state_dict()
        # Another feeder's checkpoint of the same architecture: only the input embedding depends on
        # the input width; it keeps its fresh initialisation, everything else transfers.
        fresh = sorted(k for k in own if k in found and found[k].shape != own[k].shape)
        if partial:
            if set(found) != set(own) or len(fresh) == len(own):
                raise ValueError(
                    f"init_weights: {weights} shares no layout with this config's model (init_partial needs "
                    f"the same tensor names): missing {sorted(set(own) - set(found))[:5]}, unexpected "
                    f"{sorted(set(found) - set(own))[:5]}"
                )
            log.info(
                "init_weights: %d of %d tensors transfer, %d keep their fresh initialisation: %s",
                len(own) - len(fresh),
                len(own),
                len(fresh),
                fresh,
            )
        elif set(found) != set(own) or len(fresh) > 1 or any(not k.startswith("embed_x.") for k in fresh):
            raise ValueError(
                f"init_weights: {weights} does not fit this config's model: tensors missing "
                f"{sorted(set(own) - set(found))[:5]}, unexpected {sorted(set(found) - set(own))[:5]}, "
                f"other shapes {fresh[:5]}"
            )
        self.model.load_state_dict({k: own[k] if k in fresh else v for k, v in found.items()})
        if "borders" in fresh or self.config.reset_borders:  # another bar count or target: from the prior
            self._set_borders()
        self.progress.init = {**init_record(weights), **({"kept_fresh": fresh} if fresh else {})}

    def _load_latest(self) -> None:
        name = json.loads((self.run_dir / LATEST).read_text())["checkpoint"]
        ckpt = self.run_dir / name
        if not (ckpt / "optimizer.pt").exists():
            raise ValueError(
                f"run_dir: {self.run_dir / LATEST} names {name}, which is missing or incomplete; start a new "
                f"run from the run's weights instead (gridpfn train --init-weights {self.run_dir / 'best.safetensors'})"
            )
        self.model.load_state_dict(load_file(str(ckpt / "model.safetensors"), device=str(self.device)))
        self.optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", map_location=self.device, weights_only=True))
        saved = json.loads((ckpt / "progress.json").read_text())
        self.progress = Progress(**saved)
        self.progress.threads = max(self.progress.threads, torch.get_num_threads())  # an upper bound across resumes
        log.info("resumed %s at step %d", self.run_dir, self.progress.step)


class _StopRequest:
    """SIGTERM / SIGINT during training: finish the step, write a checkpoint, return (no lost minutes)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        log.warning("signal %d: stopping after this step with a checkpoint", signum)
        self.requested = True

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
