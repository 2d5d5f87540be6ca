"""The web dashboard: static pages served by the API, built on the public `/v2` API."""
