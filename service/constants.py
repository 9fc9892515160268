"""Facts the service states in more than one place (schemas, routes, engine checks): one definition each.

Content-addressed ids: a context set's id (service.engine.context_sets) and an uploaded network's
(gridsim.feeders.network_id) are sha256 hex digests, owner-scoped by service.engine.tenants.
"""

from __future__ import annotations

SHA256_HEX = "[0-9a-f]{64}"  # inside a larger pattern (a network: a built-in name or an upload's id)
SHA256_ID = f"^{SHA256_HEX}$"
