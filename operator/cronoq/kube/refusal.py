"""The API server's own words for a request it refused: the `message` of the `Status` object it
answers with (an admission policy's message, a quota's usage, a validation error naming the field).

Read in one place, so the operator's writes, the client, the CLI and the dashboard all quote the
same text; each says on its own what it shows when there is none. It needs only the standard
library and the exception type, so the client (which keeps out of the operator's HTTP stack) can
import it too.
"""
from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException


def server_message(err: ApiException) -> str | None:
    """The `message` of the Status in `err`'s body; None when the body holds none (a proxy's page,
    an answer cut short, a Status without a message)."""
    try:
        status = json.loads(err.body or "")
    except (TypeError, ValueError):
        return None
    message = status.get("message") if isinstance(status, dict) else None
    return None if message is None else str(message)
