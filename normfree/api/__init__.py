"""normfree.api: the REST API and the dashboard (FastAPI, jinja2, plotly).

``create_app(settings)`` builds the application; ``normfree serve`` runs it with uvicorn. See
:mod:`normfree.api.app` for the layout and :mod:`normfree.api.deps` for the auth rules.
"""

from normfree.api.app import create_app

__all__ = ["create_app"]
