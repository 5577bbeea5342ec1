"""One `routedvlm serve` among replicas: every response names the replica that answered (`x-routedvlm-replica`),
so a client or a gateway log can tell which process holds a request's audit and logs (docs/deploy.md)."""

REPLICA_HEADER = "x-routedvlm-replica"


class ReplicaHeader:
    """ASGI middleware: adds `x-routedvlm-replica: <replica>` to every HTTP response (probes and errors too)."""

    def __init__(self, app, replica: str):
        self.app, self.header = app, (REPLICA_HEADER.encode(), replica.encode())

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_named(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, send_named)
