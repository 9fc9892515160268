"""The `gridpfn` command line: its entry point, `serve` (and the multi-process supervisor), `worker` and `batch`."""
