"""Statistics below every package that scores or compares routers: the metrics of P(correct) against labels
(metrics) and the paired query bootstrap (bootstrap). numpy and scipy only."""
