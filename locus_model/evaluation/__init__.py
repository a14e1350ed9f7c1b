"""How well a method routes: query and model splits (splits), metrics (metrics), paired bootstrap
statistics (bootstrap), the compared methods (methods: LOCUS and baselines), the protocol that runs them on
the same folds (protocol) and its results as JSON and tables (results)."""
