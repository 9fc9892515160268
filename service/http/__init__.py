"""The HTTP layer: the FastAPI app, its routers and the lean query layer in front of them.

It translates between HTTP and the engine (service.engine) and is the only place that knows status
codes and media types; `problems.PROBLEMS` maps the engine's domain errors to problem+json answers.
"""
