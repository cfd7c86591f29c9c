"""How long one watch request lasts and when a silent one counts as stalled. Apart from
kube/watch.py, which needs the HTTP stack: the operator's settings take their `--watch-seconds`
default from here, and the CLI builds `cronoq operator`'s flags from those settings, so every
`cronoq` command would otherwise import aiohttp just to parse its arguments."""
from __future__ import annotations

WATCH_SECONDS = 60
"""Server-side length of one watch request (`timeoutSeconds`); it is resumed from where it ended.
It also bounds how long a stalled watch goes unnoticed: see STALL_MARGIN."""
STALL_MARGIN = 15
"""A healthy watch says something at least once per WATCH_SECONDS: the API server sends a bookmark
just before it ends the request, then ends it (measured: 1-2 s before; its periodic bookmarks are
not to be relied on, the first came after 121 s). A watch silent for WATCH_SECONDS + STALL_MARGIN
is stalled (a proxy or load balancer holding a connection it no longer forwards; TCP keepalive
cannot tell, the proxy's end answers it): drop it and watch again from the last version."""
