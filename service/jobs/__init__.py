"""Batch jobs: millions of voltage queries against one context, resumable, with progress, spread over any
number of workers at once.

Modules: `settings` (GRIDPFN_JOB_* knobs), `jobspec` (spec, states, result columns), `inputs`
(upload validation into chunked Parquet), `states` (job records and chunk leases in Redis or memory),
`queue` (the Redis Stream that announces jobs), `chunks` (the chunk kernel: run chunk i, write part i),
`executors` (chunks on this process's threads), `dask_chunks` (chunks on a Dask cluster), `runner` (the
claim-run-record loop, assembly), `results` (part files, assembly, CSV streaming), `service` (what the
HTTP router calls), `worker` (the `gridpfn worker` loop), `janitor` (removes the files of expired jobs).
"""
