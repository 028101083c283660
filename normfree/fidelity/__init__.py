"""normfree.fidelity: how far a proxy's ranking predicts published at-scale results.

``reference`` holds reference sets (published outcomes as rows in the catalog's language),
``published`` the built-in set of science.md section 7, ``report`` the statistics that compare a
proxy's trials with a set (rank correlation with a bootstrap over seeds, pairwise order, failure
agreement), ``facts`` the calibration facts a default screen must reproduce. Pure: no database,
no torch; storage and the API feed it plain rows.
"""
