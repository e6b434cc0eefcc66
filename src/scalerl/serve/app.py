"""``scalerl serve``'s web app: a Starlette app over the folders it was given.

Pages (``static/*.html``) are fixed shells whose script polls the JSON endpoints and draws
with Plotly, served from the ``plotly`` package itself (``/static/plotly.min.js``): no CDN, so
the page works offline and behind a firewall.

    GET /                           the runs list              GET /api/runs
    GET /run/{id}                   a run's page               GET /api/run/{id}
                                                               GET /api/run/{id}/samples?q=&limit=
    GET /study/{id}                 a study's page             GET /api/study/{id}
    GET /compare?runs=ID,ID         picked runs compared       GET /api/compare?runs=ID,ID

An id is a path under one of the served folders; anything else is 404, so the server never
reads outside them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Route

from scalerl.fit.report import json_safe
from scalerl.serve import runs as data

STATIC = Path(__file__).resolve().parent / "static"


def plotly_js() -> Path:
    """Plotly's own bundled script (the ``plotly`` package's ``package_data``)."""
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


def build_app(roots: Sequence[Path]) -> Starlette:
    """The app over ``roots`` (run folders, study folders, or folders of either)."""
    roots = [Path(r).resolve() for r in roots]

    def lookup(kind: str, rid: str) -> tuple[data.Found, list[data.Found]]:
        found = data.discover(roots)
        hit = next((f for f in found if f.kind == kind and f.id == rid), None)
        if hit is None:
            raise HTTPException(404, f"no {kind} {rid!r} under the served folders")
        return hit, found

    def page(name: str):
        async def handler(request: Request):
            return FileResponse(STATIC / name, media_type="text/html")

        return handler

    async def api_runs(request: Request):
        found = data.discover(roots)
        return JSONResponse(json_safe({"runs": [data.summary(f) for f in found if f.kind == "run"],
                                    "studies": [{"id": f.id, "folder": str(f.path)} for f in found
                                                if f.kind == "study"]}))  # fmt: skip

    async def api_run(request: Request):
        hit, _ = lookup("run", request.path_params["rid"])
        return JSONResponse(json_safe(data.detail(hit)))

    async def api_samples(request: Request):
        hit, _ = lookup("run", request.path_params["rid"])
        try:
            limit = max(1, min(int(request.query_params.get("limit", "50")), 1000))
        except ValueError:
            raise HTTPException(400, "limit is a number of samples") from None
        return JSONResponse(json_safe(data.samples(hit, request.query_params.get("q", ""), limit)))

    async def api_study(request: Request):
        hit, found = lookup("study", request.path_params["sid"])
        return JSONResponse(json_safe(data.study(hit, [f for f in found if f.kind == "run"])))

    async def api_compare(request: Request):
        ids = [i for i in request.query_params.get("runs", "").split(",") if i]
        found = data.discover(roots)
        by_id = {f.id: f for f in found if f.kind == "run"}
        missing = [i for i in ids if i not in by_id]
        if missing or not ids:
            raise HTTPException(404, f"no run {missing[0]!r} under the served folders" if missing else "pick runs")
        return JSONResponse(json_safe(data.compare({i: by_id[i] for i in ids})))

    async def static(request: Request):
        name = request.path_params["name"]
        if name == "plotly.min.js":
            return FileResponse(plotly_js(), media_type="text/javascript")
        path = (STATIC / name).resolve()
        if path.parent != STATIC or not path.is_file():
            raise HTTPException(404, "no such file")
        return FileResponse(path)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        data.shutdown()  # the fitting thread ends with the server

    return Starlette(lifespan=lifespan, routes=[
        Route("/", page("index.html")),
        Route("/run/{rid:path}", page("run.html")),
        Route("/study/{sid:path}", page("study.html")),
        Route("/compare", page("study.html")),
        Route("/api/compare", api_compare),
        Route("/api/runs", api_runs),
        Route("/api/run/{rid:path}/samples", api_samples),
        Route("/api/run/{rid:path}", api_run),
        Route("/api/study/{sid:path}", api_study),
        Route("/static/{name}", static),
    ])  # fmt: skip
