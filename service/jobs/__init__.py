"""Batch jobs: millions of voltage queries against one context, resumable, with progress.

Modules: `settings` (GRIDPFN_JOB_* knobs), `jobspec` (spec, states, result columns), `inputs`
(upload validation into chunked Parquet), `states` (job records in Redis or memory), `queue`
(Redis Streams consumer group), `runner` (chunk processing), `results` (part files, assembly,
CSV streaming), `service` (what the HTTP router calls), `worker` (the `gridpfn worker` loop),
`janitor` (removes the files of expired jobs).
"""
