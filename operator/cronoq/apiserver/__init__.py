"""cronoq's one way to talk to the API server (issue 52), used by the operator, the pull worker and
the SDK, the client library, the CLI, the dashboard and the bench:

- `errors.py`: what the API server refused, as cronoq's own error types (`NotFound`, `Conflict`,
  `Gone`, `Forbidden`, `Refused(field, message)`, `Throttled(retry_after)`), made in one place from
  the answer's status, body and headers; standard library only, so every layer may import it;
- `config.py`: where the API server is and how to authenticate (kubeconfig or in-cluster), the one
  module that imports the `kubernetes` package (an import contract says so);
- `sync.py`: blocking JSON requests and watches over urllib3, for the worker, the client and the CLI;
- `aio.py`: the same on the event loop over aiohttp, for the operator.

Nothing here knows cronoq's objects: paths, bodies and what a refusal means to the caller are the
caller's. Importing the package imports only the error types.
"""
