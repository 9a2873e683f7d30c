"""lm-eval in both directions: ``--baseline-samples`` imports lm-eval's ``--log_samples``
output as a run folder (``samples``), and ``python -m evalgate.lmeval`` is lm-eval's own CLI
with evalgate's scorer registered as a model (``model``)."""
