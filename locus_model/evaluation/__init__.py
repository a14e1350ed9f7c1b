"""How well a method routes: query and model splits (splits), the compared methods (methods: LOCUS and baselines), the
protocol that runs them on the same folds (protocol) and its results as JSON and tables (results). The metrics and the
paired bootstrap are
in locus_model.stats, below training and routing, which use them too."""
