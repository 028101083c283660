"""``/docs`` works with no network (issue 27, point 7): Swagger UI's files come from the
package, every URL the page loads is this server's, and each answers."""

from __future__ import annotations

import re

from tests.api.conftest import Api

# what a page loads: src/href attributes and the URLs handed to SwaggerUIBundle
_URLS = re.compile(r"""(?:src|href)=["']([^"']+)["']|url:\s*['"]([^'"]+)['"]""")


def test_docs_load_only_local_assets_and_each_answers(api: Api) -> None:
    page = api.client.get("/docs")
    assert page.status_code == 200
    html = page.text
    assert "SwaggerUIBundle" in html
    assert "http://" not in html and "https://" not in html  # no CDN, no favicon from afar
    urls = [a or b for a, b in _URLS.findall(html)]
    assert {"/openapi.json", "/static/swagger-ui/swagger-ui-bundle.js"} <= set(urls), urls
    assert "/static/swagger-ui/swagger-ui.css" in urls
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        got = api.client.get(url)
        assert got.status_code == 200, (url, got.status_code)
        assert got.content, url
    # the bundle is Swagger UI 5 (OpenAPI 3.1, which FastAPI writes, needs it)
    assert api.client.get("/openapi.json").json()["openapi"].startswith("3.1")
    assert "validatorUrl" in html  # the validator badge (an image from swagger.io) is off


def test_the_bundled_files_keep_their_licence(api: Api) -> None:
    for name in ("LICENSE", "NOTICE"):
        assert api.client.get(f"/static/swagger-ui/{name}").status_code == 200
    assert "Apache License" in api.client.get("/static/swagger-ui/LICENSE").text


def test_redoc_is_not_served_from_a_cdn(api: Api) -> None:
    assert api.client.get("/redoc").status_code == 404
