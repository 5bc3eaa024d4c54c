"""Parallel data: every form it ships in, cleaning, token batches, the joint BPE."""
