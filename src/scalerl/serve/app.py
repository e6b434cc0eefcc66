"""``scalerl serve``'s web app: a Starlette app over the folders it was given.

Pages (``static/*.html``) are fixed shells whose script polls the JSON endpoints and draws
with Plotly, served from the ``plotly`` package itself (``/static/plotly.min.js``): no CDN, so
the page works offline and behind a firewall.

    GET /                           the runs list              GET /api/runs
                                                               GET /api/overview?runs=ID,ID
    GET /run/{id}                   a run's page               GET /api/run/{id}
                                                               GET /api/run/{id}/samples?q=&limit=
                                                               GET /api/run/{id}/metrics.jsonl
    GET /study/{id}                 a study's page             GET /api/study/{id}
    GET /compare?runs=ID,ID         picked runs compared       GET /api/compare?runs=ID,ID

An id is a path under one of the served folders; anything else is 404, and every file is read
through ``files.Files``, which refuses a symbolic link that leads outside them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from anyio.to_thread import run_sync
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from scalerl import runfolder as rf
from scalerl.fit.report import json_safe
from scalerl.serve.files import MAX_LOG
from scalerl.serve.overview import config_values, overview
from scalerl.serve.runs import Found, Served
from scalerl.serve.study import compare
from scalerl.serve.study import study as study_page

STATIC = Path(__file__).resolve().parent / "static"
CHUNK = 1 << 20  # bytes a download reads at a time
MAX_STREAMS = 4  # downloads at once: 12 of a 250 MB log each held it whole and ran out of memory


class AnyPath(Convertor):
    """A run's id as a path of any characters: Starlette's ``path`` stops at a newline, so a
    folder named with one was listed and then 404."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("anypath", AnyPath())


def plotly_js() -> Path:
    """Plotly's own bundled script (the ``plotly`` package's ``package_data``)."""
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


class _Handlers:
    """The endpoints over one ``runs.Served``. They are plain methods, which Starlette runs in
    its thread pool: reading a large log or waiting on a forecast never holds the event loop, so
    a static file or another run's page is answered meanwhile."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.streams = threading.BoundedSemaphore(MAX_STREAMS)  # downloads under way at once

    def lookup(self, kind: str, rid: str) -> tuple[Found, list[Found]]:
        found = self.served.discover()
        hit = next((f for f in found if f.kind == kind and f.id == rid), None)
        if hit is None:
            raise HTTPException(404, f"no {kind} {rid!r} under the served folders")
        return hit, found

    @staticmethod
    def page(name: str):
        def handler(request: Request):
            return FileResponse(STATIC / name, media_type="text/html")

        return handler

    def runs(self, request: Request):
        found = self.served.discover()
        runs = [f for f in found if f.kind == "run"]
        self.served.prefetch(runs)
        columns, values, more = config_values(self.served, runs)
        return JSONResponse(json_safe({"runs": [self.served.summary(f) | {"values": values[f.id]} for f in runs],
                                       "columns": columns, "more_columns": more,
                                       "studies": [{"id": f.id, "folder": str(f.path)} for f in found
                                                   if f.kind == "study"],
                                       "truncated": self.served.truncated}))  # fmt: skip

    def overview(self, request: Request):
        runs = [f for f in self.served.discover() if f.kind == "run"]
        picked = [i for i in request.query_params.get("runs", "").split(",") if i]
        if picked:
            runs = [f for f in runs if f.id in set(picked)]
        return JSONResponse(json_safe(overview(self.served, runs)))

    def records(self, request: Request):
        hit, _ = self.lookup("run", request.path_params["rid"])
        name = quote(hit.id.replace("/", "_") or "run", safe="")  # any folder name, as RFC 6266's UTF-8 form
        headers = {"Content-Disposition": f"attachment; filename=\"run.metrics.jsonl\"; "
                                          f"filename*=UTF-8''{name}.metrics.jsonl"}  # fmt: skip
        try:
            handle, size = self.served.files.open(hit.path / rf.METRICS, MAX_LOG)
        except FileNotFoundError:
            return Response(b"", media_type="application/x-ndjson", headers=headers)
        except (rf.BadRunFile, OSError) as err:
            raise HTTPException(409, str(err)) from None
        if not self.streams.acquire(blocking=False):
            handle.close()
            raise HTTPException(503, f"{MAX_STREAMS} downloads are under way; try again in a moment",
                                headers={"Retry-After": "5"})  # fmt: skip
        return StreamingResponse(self._chunks(handle, size), media_type="application/x-ndjson",
                                 headers={**headers, "Content-Length": str(size)})

    async def _chunks(self, handle, size: int):
        """The file as it was when opened (its size then), a chunk at a time off the event loop:
        one download holds ``CHUNK`` bytes, never the file; the slot and the file are let go
        when the client has it all or goes away."""
        try:
            left = size
            while left > 0:
                chunk = await run_sync(handle.read, min(CHUNK, left))
                if not chunk:
                    break
                left -= len(chunk)
                yield chunk
        finally:
            handle.close()
            self.streams.release()

    def run(self, request: Request):
        hit, _ = self.lookup("run", request.path_params["rid"])
        return JSONResponse(json_safe(self.served.detail(hit)))

    def samples(self, request: Request):
        hit, _ = self.lookup("run", request.path_params["rid"])
        try:
            limit = max(1, min(int(request.query_params.get("limit", "50")), 1000))
        except ValueError:
            raise HTTPException(400, "limit is a number of samples") from None
        try:
            rows = self.served.samples(hit, request.query_params.get("q", ""), limit)
        except rf.BadRunFile as err:
            rows = [{"step": None, "prompt": f"(samples not shown: {err})", "completion": ""}]
        return JSONResponse(json_safe(rows))

    def study(self, request: Request):
        hit, found = self.lookup("study", request.path_params["sid"])
        baseline = request.query_params.get("baseline") or None
        return JSONResponse(json_safe(study_page(self.served, hit, [f for f in found if f.kind == "run"], baseline)))

    def compare(self, request: Request):
        ids = [i for i in request.query_params.get("runs", "").split(",") if i]
        by_id = {f.id: f for f in self.served.discover() if f.kind == "run"}
        missing = [i for i in ids if i not in by_id]
        if missing or not ids:
            raise HTTPException(404, f"no run {missing[0]!r} under the served folders" if missing else "pick runs")
        baseline = request.query_params.get("baseline") or None
        return JSONResponse(json_safe(compare(self.served, {i: by_id[i] for i in ids}, baseline)))

    @staticmethod
    def static(request: Request):
        name = request.path_params["name"]
        if name == "plotly.min.js":
            return FileResponse(plotly_js(), media_type="text/javascript")
        path = (STATIC / name).resolve()
        if path.parent != STATIC or not path.is_file():
            raise HTTPException(404, "no such file")
        return FileResponse(path)


def build_app(roots: Sequence[Path]) -> Starlette:
    """The app over ``roots`` (run folders, study folders, or folders of either). Everything the
    server keeps lives in one ``runs.Served``, closed with the app."""
    served = Served(roots)
    h = _Handlers(served)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        served.close()  # the forecast thread ends with the server

    app = Starlette(lifespan=lifespan, routes=[
        Route("/", h.page("index.html")),
        Route("/run/{rid:anypath}", h.page("run.html")),
        Route("/study/{sid:anypath}", h.page("study.html")),
        Route("/compare", h.page("study.html")),
        Route("/api/compare", h.compare),
        Route("/api/runs", h.runs),
        Route("/api/overview", h.overview),
        Route("/api/run/{rid:anypath}/metrics.jsonl", h.records),
        Route("/api/run/{rid:anypath}/samples", h.samples),
        Route("/api/run/{rid:anypath}", h.run),
        Route("/api/study/{sid:anypath}", h.study),
        Route("/static/{name}", h.static),
        Route("/favicon.ico", lambda request: Response(status_code=204)),  # no icon, and no 404 in the console
    ])  # fmt: skip
    app.state.served = served
    return app
