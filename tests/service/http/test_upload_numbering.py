"""An uploaded MATPOWER case keeps its own bus numbers in every use, over real HTTP: the upload's answer and
GET /v1/networks/{id} describe it from MATPOWER's bus 1, and /v1/simulate, a context set and /v1/predict, a study
(`bus_load_scale`, DER bus), hosting capacity (`buses`), meter placement, the page's load list and a batch job's
wide and long result (run by the job's own rebuild of the network) number its buses and name its columns the same.
They rebuilt the stored pandapower JSON numbered from 0 (`p_mw_bus1`, `vm_pu_bus1` ...)."""

from __future__ import annotations

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa

from gridsim.feeders import from_matpower, number_offset
from service.jobs.chunks import job_network
from service.jobs.jobspec import JobSpec
from service.jobs.results import JobFiles
from tests.gridsim.feeder_cases import CASE4_M
from tests.service.batch_support import done, wait_for
from tests.service.conftest import assert_problem, rows

# CASE4_M: bus 1 the slack, loads at buses 2 and 3, bus 4 (no load) off bus 2
FEATURES = ["p_mw_bus2", "p_mw_bus3", "q_mvar_bus2", "q_mvar_bus3"]
OUTPUTS = ["vm_pu_bus2", "vm_pu_bus3", "vm_pu_bus4"]
BASE = [0.1, 0.09, 0.06, 0.04]  # the case's own loads (MW, Mvar), in feature order


def test_a_matpower_upload_is_numbered_as_its_description_in_every_use(memory_server):
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        made = client.post("/v1/networks", content=CASE4_M, headers={"content-type": "text/plain"})
        assert made.status_code == 201, made.text
        nid = made.json()["id"]
        described = client.get(f"/v1/networks/{nid}").json()
        for info in (made.json(), described):
            assert info["format"] == "matpower" and info["slack_bus"] == 1
            assert [b["bus"] for b in info["buses"]] == [1, 2, 3, 4]
            assert [load["bus"] for load in info["loads"]] == [2, 3]
            assert info["features"] == FEATURES and info["outputs"] == OUTPUTS

        simulated = client.post("/v1/simulate", json={"network": nid, "loads": [BASE]})
        assert simulated.status_code == 200, simulated.text
        assert simulated.json()["outputs"] == OUTPUTS

        spec = {"network": nid, "delta": 0.2, "n": 40, "seed": 3}
        made_set = client.post("/v1/context-sets", json={"simulate": spec})
        assert made_set.status_code == 201, made_set.text
        cid = made_set.json()["id"]
        predicted = client.post("/v1/predict", json={"model": "physics-fit", "context_id": cid, "queries": [BASE]})
        assert predicted.status_code == 200, predicted.text
        assert predicted.json()["outputs"] == OUTPUTS

        loads = client.get(f"/ui/api/networks/{nid}/loads")
        assert loads.status_code == 200, loads.text
        assert loads.json()["load_buses"] == [2, 3]

        # bus 3 is a load bus as described (rebuilt from 0, the load buses were 1 and 2: a 422)
        scenario = {"name": "s", "bus_load_scale": {"3": 1.5}, "der": [{"bus": 3, "kw": 20}]}
        study = client.post("/v1/studies", json={"context_id": cid, "scenarios": [scenario], "detail": "long"})
        assert study.status_code == 200, study.text
        assert [s["bus"] for s in study.json()["summary"]] == [2, 3, 4]
        assert sorted(set(study.json()["long"]["bus"])) == [2, 3, 4]
        named_by_index = {"name": "s", "bus_load_scale": {"1": 1.5}}  # pandapower's index of bus 2: no load bus
        assert_problem(client.post("/v1/studies", json={"context_id": cid, "scenarios": [named_by_index]}), 422)
        hosting = client.post("/v1/hosting-capacity", json={"context_id": cid, "buses": [3], "load_scales": [1.0]})
        assert hosting.status_code == 200, hosting.text
        assert [b["bus"] for b in hosting.json()["buses"]] == [3]

        x = np.array(BASE) * np.random.default_rng(4).uniform(0.5, 1.5, (40, 1))
        y = np.array(client.post("/v1/simulate", json={"network": nid, "loads": rows(x)}).json()["vm_pu"])
        unread = [[float(a), float(b), None] for a, b in y[:, :2]]  # bus 4 has no meter
        context = {"network": nid, "x": rows(x), "y": unread}
        placed = client.post("/v1/meter-placement", json={"context": context, "queries": [BASE]})
        assert placed.status_code == 200, placed.text
        assert [(b["bus"], b["output"]) for b in placed.json()["buses"]] == [(4, "vm_pu_bus4")]

        job = client.post(
            "/v1/batch-jobs",
            json={"simulate": {**spec, "n": 6}, "model": "physics-fit", "context_id": cid, "with_ground_truth": True},
        )
        assert job.status_code == 202, job.text
        status = wait_for(client, job.json()["id"], done)
        assert status["state"] == "done", status
        wide = client.get(f"/v1/batch-jobs/{job.json()['id']}/result", params={"format": "parquet"})
        assert wide.status_code == 200, wide.text
        columns = pd.read_parquet(pa.BufferReader(wide.content)).columns
        assert list(columns[:4]) == FEATURES
        assert [c for c in columns if c.startswith("mean_")] == [f"mean_{o}" for o in OUTPUTS]
        assert [c for c in columns if c.startswith("true_")] == [f"true_{o}" for o in OUTPUTS]
        long = client.get(f"/v1/batch-jobs/{job.json()['id']}/result", params={"layout": "long", "format": "parquet"})
        assert long.status_code == 200, long.text
        assert list(pd.read_parquet(pa.BufferReader(long.content)).query("row == 0")["bus"]) == [2, 3, 4]


def test_a_jobs_worker_rebuilds_the_upload_numbered_as_its_spec_says(tmp_path):
    """The spec carries the numbering through its JSON (Redis, a `gridpfn worker`, dask); a spec stored before it
    did is rebuilt by index, as its features were named then."""
    network = from_matpower(CASE4_M)
    files = JobFiles(tmp_path, "job")
    files.dir.mkdir()
    files.network.write_text(network.source_json)
    fields = dict(
        id="job",
        model="physics-fit",
        model_version="1",
        context_id="0" * 64,
        network=network.name,
        rows=1,
        chunk_rows=1,
        source="simulate",
        created_at=0.0,
    )
    spec = JobSpec(**fields, features=FEATURES, outputs=OUTPUTS, number_offset=number_offset(network))
    rebuilt = job_network(JobSpec.model_validate_json(spec.model_dump_json()), files)
    assert list(rebuilt.feature_names) == FEATURES and list(rebuilt.output_names) == OUTPUTS
    old = JobSpec.model_validate_json(JobSpec(**fields, features=[], outputs=[]).model_dump_json())
    assert old.number_offset is None and job_network(old, files).feature_names[0] == "p_mw_bus1"
