"""Support shared by the test suite and the benchmarks: a live ``normfree serve`` process
(:mod:`.live`), a database seeded with a real property or search study (:mod:`.seeding`,
:mod:`.search_seeding`) and scratch PostgreSQL databases (:mod:`.databases`).

In the package rather than under ``tests/`` so that a benchmark imports it like any module
instead of putting the test tree on its import path; nothing in the service imports it.
"""
