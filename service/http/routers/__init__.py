"""One router per resource; /v1 routers carry the API-key dependency."""
