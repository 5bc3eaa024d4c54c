"""Evaluation: sacreBLEU scores of a model on a dataset split, and checkpoint selection on validation."""
