"""Checkpoints: opening one, saving one, its card, its digest."""
