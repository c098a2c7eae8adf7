"""The API's routes, one module per resource, reads and writes in routers of their own.

`api.app.create_app` adds their routes to each app it builds, with the read gate in front of
the reads when the settings close them; the writes carry the write gate themselves (`api.deps`).
"""
