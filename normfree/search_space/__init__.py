"""Expression language, catalog, transforms, properties and dedup (the bottom layer)."""
