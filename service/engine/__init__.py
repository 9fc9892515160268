"""The engine: models, context sets, caches and workers behind the HTTP layer.

It takes plain arrays and request objects, returns plain results and refuses with domain errors
(service.engine.errors); no module here imports Starlette or FastAPI (tests/service/engine/test_rooms.py).
"""
