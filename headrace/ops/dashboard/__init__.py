"""The dashboard: jobs, models (with the confusion matrix), scorers, dead letters.

Embeddable: ``Dashboard(...).start()`` serves from a thread and returns its URL (``headrace up``
does this); ``serve_forever`` is ``headrace dashboard``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from headrace.core.settings import Settings
from headrace.ops.dashboard.server import Api, make_server
from headrace.ops.dashboard.state import DashboardState
from headrace.streams.clients import KafkaConnection

__all__ = ["Dashboard", "serve_forever"]


class Dashboard:
    def __init__(self, *, settings: Settings, conn: KafkaConnection | None,
                 host: str = "127.0.0.1", port: int = 0,
                 scorer_urls: list[str] | None = None, token: str | None = None,
                 control_url: str | None = None) -> None:
        self.state = DashboardState(settings=settings, conn=conn,
                                    scorer_urls=list(scorer_urls or ()), control_url=control_url)
        self.server = make_server(Api(self.state), host=host, port=port, token=token)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> str:
        self.state.start()
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                        name="dashboard-http")
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.state.stop()


def serve_forever(*, settings: Settings, conn: KafkaConnection | None, host: str, port: int,
                  scorer_urls: list[str], announce: Callable[[str], None],
                  token: str | None = None, control_url: str | None = None) -> None:
    d = Dashboard(settings=settings, conn=conn, host=host, port=port, scorer_urls=scorer_urls,
                  token=token, control_url=control_url)
    d.state.start()
    announce(d.url)
    try:
        d.server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        d.server.server_close()
        d.state.stop()
