"""``scalerl serve``: a live local page over run and study folders (issue 39).

``runs`` reads what runs write (no web server, no torch); ``app`` serves it (Starlette, the
pages in ``static/`` drawing with the ``plotly`` package's own script); ``cli`` starts it.
"""
