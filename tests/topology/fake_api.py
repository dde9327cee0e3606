"""A recording fake of the Kubernetes API server, plugged in as the real client's transport
(``ApiClient().rest_client``): it keeps objects by URL and answers as an API server would --
201 on create, 409 on an existing name, 200/404 on get, patch and delete, 415 for a whole object
sent as a JSON Patch, a server-side apply (``application/apply-patch+yaml``) as a create (201) or
a replace (200) (``dryRun=All``: stored nowhere), and lists filtered by ``labelSelector``
(``key=value`` terms)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl


class FakeApiServer:
    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.queries: list[dict[str, str]] = []  # each request's query, in the same order

    def _list(self, path: str, query: dict[str, str]) -> dict[str, Any]:
        terms = [t.split("=", 1) for t in query.get("labelSelector", "").split(",") if t]
        items = [o for p, o in self.objects.items()
                 if p.rsplit("/", 1)[0] == path
                 and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in terms)]
        return {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items}

    def request(self, method: str, url: str, headers: dict[str, str] | None = None,
                body: Any = None, **_: Any) -> Any:
        import urllib3
        from kubernetes.client import rest

        parsed = urllib3.util.parse_url(url)
        path, query = parsed.path or "", dict(parse_qsl(parsed.query or ""))
        ctype = (headers or {}).get("Content-Type")
        self.requests.append((method, path, ctype))
        self.queries.append(query)
        out: Any = {}
        if method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            status = 409 if path in self.objects else 201
        elif method == "GET" and path in self.objects:
            status, out = 200, self.objects[path]
        elif method == "GET" and "labelSelector" in query:
            status, out = 200, self._list(path, query)
        elif method == "DELETE":
            status = 200 if self.objects.pop(path, None) is not None else 404
        elif ctype == "application/json-patch+json" and not isinstance(body, list):
            status = 415
        elif ctype == "application/apply-patch+yaml":
            body = json.loads(body)
            status = 200 if path in self.objects else 201
        else:
            status = 200 if path in self.objects else 404
        if method in ("POST", "PATCH") and status in (200, 201):
            if query.get("dryRun") != "All":
                self.objects[path] = body
            out = body
        resp = urllib3.HTTPResponse(body=json.dumps(out).encode(), status=status,
                                    headers={"Content-Type": "application/json"},
                                    preload_content=True)
        return rest.RESTResponse(resp)


def fake_client(server: FakeApiServer) -> Any:
    from kubernetes.client import ApiClient

    api = ApiClient()
    api.rest_client = server
    return api
