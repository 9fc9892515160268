"""Writes a feeder-agnostic checkpoint's accuracy on operating data into its model card, from the full
bench/accuracy_v3.py run (bench/results/accuracy-v3.json, every figure through the HTTP API).

Per scenario: MAE (p.u.) and its ratio to physics-fit's, worst-bus and mean 95 % coverage, mean interval width
over the width that would just cover, seconds per request. The summary counts the cells where the feeder is
uploaded or its model is off (SimBench; IEEE 33 with its lines 0.7-1.3x off, the substation at 1.03 p.u. or a
regulator, none told) against issue 29's bar for such a checkpoint: MAE no worse than physics-fit's, worst-bus
coverage in [0.90, 0.97].

    .venv/bin/python bench/card_accuracy.py transformer-dva-any 0.4.0
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "bench" / "results" / "accuracy-v3.json"
BAND = (0.90, 0.97)


def scenarios(results: dict, name: str) -> dict[str, dict]:
    """Per scenario that the model answered: its figures beside physics-fit's MAE."""
    out = {}
    for title, rows in results["scenarios"].items():
        mine, physics = rows.get(f"{name} via HTTP"), rows.get("physics-fit via HTTP")
        if mine is None or physics is None:
            continue
        out[title] = {
            "mae": mine["mae"],
            "mae_over_physics_fit": mine["mae"] / physics["mae"] if physics["mae"] > 0 else None,
            "coverage95_worst": mine["coverage_worst"],
            "coverage95_mean": mine["coverage_mean"],
            "width_over_cover": mine["width_over_cover"],
            "seconds": mine["seconds"],
        }
    return out


def summary(cells: dict[str, dict]) -> str:
    """The uploaded-feeder cells against the band, in plain words."""
    judged = {t: c for t, c in cells.items() if not t.startswith("ieee33 ")}  # "ieee33 ...": the model right
    worst = {t: c["coverage95_worst"] for t, c in judged.items()}
    inside = [t for t, w in worst.items() if BAND[0] <= w <= BAND[1]]
    above = sorted(w for w in worst.values() if w > BAND[1])
    below = {t: w for t, w in worst.items() if w < BAND[0]}
    ratios = [c["mae_over_physics_fit"] for c in judged.values() if c["mae_over_physics_fit"] is not None]
    widths = [c["width_over_cover"] for c in judged.values() if c["width_over_cover"] is not None]
    text = (
        f"MAE {min(ratios):.5f}-{max(ratios):.5f}x physics-fit's. Worst-bus 95 % coverage between {BAND[0]:.2f} and "
        f"{BAND[1]:.2f} in {len(inside)} of the {len(judged)} cells where the feeder is uploaded or its model is off "
        f"(SimBench; IEEE 33 with lines, set point or a regulator not told); above {BAND[1]:.2f} in {len(above)}"
    )
    if above:
        text += f" ({above[0]:.3f}-{above[-1]:.3f})"
    text += f"; below {BAND[0]:.2f} in {len(below)}"
    if below:
        text += " (" + ", ".join(f"{t}: {w:.3f}" for t, w in sorted(below.items())) + ")"
    return text + f"; its intervals {min(widths):.2f}-{max(widths):.2f}x the width that would just cover."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("version")
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--registry", type=Path, default=ROOT / "models" / "registry")
    args = parser.parse_args()
    results = json.loads(args.source.read_text())
    cells = scenarios(results, args.name)
    if not cells:
        raise SystemExit(f"{args.source}: no scenario answered by {args.name}")
    path = args.registry / args.name / args.version / "card.json"
    card = json.loads(path.read_text())
    card["accuracy"] = {
        "source": f"bench/results/accuracy-v3.md ({results['provenance']})",
        "machine": results["machine"],
        "metric": "through the HTTP API against the noise-free truth: MAE (p.u.) and its ratio to physics-fit, "
        "worst-bus and mean 95 % coverage, mean interval width over the covering width, seconds per request",
        "summary": summary(cells),
        "scenarios": cells,
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(card, indent=2) + "\n")
    tmp.replace(path)  # whole or not at all
    print(card["accuracy"]["summary"])


if __name__ == "__main__":
    main()
